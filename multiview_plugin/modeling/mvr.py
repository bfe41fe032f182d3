"""MVR (Zhang et al., 2022, "Multi-View Document Representation Learning for Open-Domain Dense Retrieval").

k new viewer tokens replace [CLS] in documents, ``[VIE1] ... [VIEk] d [SEP]``, and one query viewer replaces
it in queries, ``[VIE] q [SEP]``. Every viewer sits at position id 0 and the document tokens keep positions
1..n, "to avoid effect on the positional encoding of the original input" (paper §3.2); with
``mvr_viewer_positions='distinct'`` they take positions 0..k-1 instead (see the option's help). The last-layer
states of the k viewers are the document's views; the score is the max over views (eq. 4), trained with
the global-local loss under an annealed temperature (eqs. 5-8).

``mvr_views='residual'`` is this package's form for mean-pooled backbones (all-MiniLM-L6-v2 and most
sentence-transformers models), on which the paper's viewers collapse into one state: the text is encoded
exactly as dpr encodes it, the k viewers are appended as read-only tokens (they attend to the text and to
themselves; the text never attends to them), and view i = pool(text) + g_i · h(viewer i) with gates g_i that
start at 0 and train at their own learning rate. An untrained model therefore scores exactly like dpr with
the same ``--pooling``, and training moves each view away from the pooled text only as far as it helps.
With ``mvr_viewer_scope='segments'`` viewer i attends only to the i-th of k contiguous segments of the text
(:func:`segment_mask`) instead of all of it; the text is encoded as before, so that too starts as dpr.
With ``mvr_sentence_distill_weight`` w > 0, training adds w · mean_j (1 − max_i cos(v_i, s_j)) over each training
passage's sentence vectors s_j — the span means of its sentences' text token states from the same forward pass, as
dcsr's ``--dcsr_sentence_pooling mean`` forms its sentence views, finished like the views and detached
(:func:`~multiview_plugin.losses.sentence_coverage.sentence_coverage_loss`), logged as ``loss_distill``: every
sentence should be covered by some view. Only the training collator asks the formatter for the sentence spans,
so encoding and search are unchanged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from multiview_plugin.bounds import MAX_PER_ITEM
from multiview_plugin.data.sentences import sentence_spans, split_sentences, token_spans
from multiview_plugin.errors import ConfigError
from multiview_plugin.losses.sentence_coverage import sentence_coverage_loss
from multiview_plugin.losses.temperature import DEFAULT_ALPHA, MIN_TEMPERATURE
from multiview_plugin.modeling.base import EncoderOutput, MultiViewEncoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.dcsr import span_means
from multiview_plugin.modeling.formatting import InputFormatter, pad_sequences
from multiview_plugin.modeling.options import MethodOptions, option
from multiview_plugin.modeling.tokens import add_marker_tokens, token_ids
from multiview_plugin.registry import register_encoder

logger = logging.getLogger(__name__)

QUERY_VIEWER = "[VIE]"
VIEW_FORMS = ("paper", "residual")
VIEWER_SCOPES = ("full", "segments")
SENTENCE_SPAN_KEYS = ("sentence_starts", "sentence_ends", "sentence_mask")  # dcsr's mean-pooling layout
COLLAPSE_COSINE = 0.99
DEFAULT_GATE_LEARNING_RATE = 1e-3
# A few neutral passages to probe the viewer states of a freshly built model (the collapse guard).
PROBE_TEXTS = ("The river flows north through the old city before it reaches the sea.",
               "In 1850 the company built a railway line between the two largest towns.",
               "The festival is held every summer and attracts musicians from many countries.",
               "Its highest mountain was first climbed by a team of three in the winter.")


@dataclass(eq=False)
class MvrOptions(MethodOptions):
    """MVR's options, the ``--mvr_*`` flags (Zhang et al., 2022)."""

    prefix: ClassVar[str] = "mvr_"
    num_views: int = option(8, "MVR: number k of document viewer tokens [VIE1]..[VIEk] (paper best: 8).",
                            bounds=(1, MAX_PER_ITEM))
    lam: float = option(0.01, "MVR: weight lambda of the local uniformity loss (paper: 0.01).", flag="mvr_lambda",
                        bounds=(0.0, None))
    alpha: float = option(DEFAULT_ALPHA, "Annealed temperature: decay rate alpha per epoch (MVR paper: 0.1).",
                          bounds=(0.0, None))
    min_temperature: float = option(MIN_TEMPERATURE, "Annealed temperature: floor of tau (MVR paper: 0.3).")
    viewer_init: str = option(
        "random",
        "MVR: how new viewer-token embeddings start: 'random' (the paper: initialised like "
        "the backbone's embeddings) or 'cls' (copies of the [CLS] embedding).")
    views: str = option(
        "paper",
        "MVR: what a document view is. 'paper': the last-layer state of viewer token i (eq. 3). "
        "'residual' (for mean-pooled backbones such as all-MiniLM-L6-v2): the document text is encoded "
        "exactly as dpr encodes it (the viewers are appended as read-only tokens: they attend to the text, "
        "the text does not attend to them), and view i = pool(text) + g_i * h(viewer i) with a learned gate "
        "g_i that starts at 0, so an untrained model scores exactly like dpr with the same --pooling; "
        "queries are pooled like dpr's.")
    gate_learning_rate: float | None = option(
        None,
        "MVR --mvr_views residual: learning rate of the view gates g_i (default 1e-3: at the "
        "backbone's 2e-5 they barely leave 0 within a few thousand steps, so the views never diverge).",
        bounds=(0.0, None))
    viewer_positions: str = option(
        "shared",
        "MVR: 'shared' (the paper: every viewer at position id 0, text from 1) or 'distinct' "
        "(viewers at 0..k-1, text from k). Backbones whose position 0 is an attention sink (e.g. "
        "all-MiniLM-L6-v2) map all shared-position viewers to one state (Local Variation ~ 0); "
        "'distinct' keeps the views apart.")
    balance_weight: float = option(
        0.0,
        "MVR: weight of a load-balancing term on the view assignment, as in mixture-of-experts routing (Switch "
        "Transformer, Fedus et al. 2021): k * sum_i f_i * P_i over the batch's queries, with P_i the mean softmax "
        "probability of view i over the positive passage's views (at the loss's temperature) and f_i the "
        "fraction of queries whose best view is i. 1 when the views share the queries evenly, up to k when one "
        "view takes every query. Default 0: the paper's loss, unchanged.")
    viewer_scope: str = option(
        "full",
        "MVR --mvr_views residual: what each read-only viewer attends to. 'full' (default): the whole passage "
        "text. 'segments': the passage's real tokens ([CLS] and [SEP] included) are cut into k contiguous, "
        "near-equal segments, floor(i*n/k) .. floor((i+1)*n/k) - 1 for viewer i (0-based), and viewer i attends "
        "only to its own segment and itself (a passage of fewer than k tokens: a viewer whose segment is empty "
        "attends to the whole text). The text never attends to the viewers either way, so an untrained model "
        "still scores exactly like dpr.")
    sentence_distill_weight: float = option(
        0.0,
        "MVR --mvr_views residual: weight w of a sentence-coverage term distilling the views toward the passage's "
        "sentence views: w * mean_j (1 - max_i cos(v_i, s_j)) over each training passage, with s_j the mean of "
        "sentence j's text token states from the same forward pass (as --dcsr_sentence_pooling mean forms its "
        "sentence views), finished like the views and detached (a teacher). Every sentence should be covered by "
        "some view, which pushes the views apart toward distinct sentences. Logged as loss_distill; training "
        "only (encoding is unchanged). Default 0: off.")


def viewer_tokens(num_views: int) -> list[str]:
    """Document viewer token strings ``[VIE1] .. [VIEk]``."""
    return [f"[VIE{i}]" for i in range(1, num_views + 1)]


class ViewerFormatter(InputFormatter):
    """Builds MVR inputs with explicit position ids (viewers at 0, text from 1).

    ``passage_max_len`` bounds the positions used (viewer position 0, text, [SEP]), so the passage text kept
    is the same as a single-vector model's with the same ``passage_max_len``; the sequence itself is k−1
    tokens longer.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, num_views: int = 8, viewer_positions: str = "shared",
                 views: str = "paper", sentence_spans: bool = False, **kwargs: Any):
        super().__init__(tokenizer, **kwargs)
        self.num_views = num_views
        self.viewer_positions = viewer_positions
        self.views = views
        self.sentence_spans = sentence_spans  # residual passages also carry their sentences' token spans
        ids = token_ids(tokenizer, [QUERY_VIEWER, *viewer_tokens(num_views)], "mvr")
        self.query_viewer_id, self.viewer_ids = ids[0], ids[1:]

    def queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.views == "residual":  # queries exactly as dpr's
            return super().queries(texts)
        end = self.end_token_id()
        body = self.tokenize_plain([self.query_prefix + t for t in texts], self.query_max_len - 2)
        seqs = [[self.query_viewer_id, *ids, end] for ids in body]
        return self.assemble(seqs, [list(range(len(s))) for s in seqs])

    def passages(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.views == "residual":
            return self.residual_passages(texts)
        end = self.end_token_id()
        body = self.tokenize_plain([self.passage_prefix + t for t in texts], self.passage_max_len - 2)
        k = self.num_views
        seqs = [[*self.viewer_ids, *ids, end] for ids in body]
        if self.viewer_positions == "distinct":
            positions = [list(range(k + len(ids) + 1)) for ids in body]
        else:
            positions = [[0] * k + list(range(1, len(ids) + 2)) for ids in body]
        return self.assemble(seqs, positions)

    def residual_passages(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """dpr's passage batch (B, L) with the k viewer tokens appended after the padding, (B, L + k):
        positions 1..k, attention-mask 1; ``num_text_tokens`` = L tells the model where the viewers start."""
        batch = super().passages(texts)
        size, k = batch["input_ids"].shape[0], self.num_views
        text_len = batch["input_ids"].shape[1]
        viewers = torch.tensor(self.viewer_ids, dtype=torch.long).expand(size, k)
        out = {"input_ids": torch.cat([batch["input_ids"], viewers], 1),
               "attention_mask": torch.cat([batch["attention_mask"], torch.ones(size, k, dtype=torch.long)], 1),
               "position_ids": torch.cat([torch.arange(text_len).expand(size, text_len),
                                          torch.arange(1, k + 1).expand(size, k)], 1),
               "num_text_tokens": torch.tensor(text_len)}
        if "token_type_ids" in batch:
            out["token_type_ids"] = torch.cat([batch["token_type_ids"], torch.zeros(size, k, dtype=torch.long)], 1)
        if self.sentence_spans:
            out.update(self.sentence_token_spans(texts, batch["attention_mask"]))
        return out

    def sentence_token_spans(self, texts: Sequence[str], attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each passage's sentences (dcsr's segmentation, :func:`split_sentences` of prefix + text) as token spans
        of its residual text encoding, in dcsr's mean-pooling layout: ``sentence_starts``, ``sentence_ends`` and
        ``sentence_mask`` (B, S). The spans come from the tokenizer's character offsets of the very tokens the
        model reads, so a passage cut by ``passage_max_len`` keeps the sentences it still shows."""
        if not getattr(self.tokenizer, "is_fast", False):
            raise ConfigError("--mvr_sentence_distill_weight needs a fast tokenizer (its character offsets), "
                              f"got {type(self.tokenizer).__name__}")
        full = [self.passage_prefix + t for t in texts]
        offsets = self.tokenizer(full, max_length=self.passage_max_len, truncation=True,
                                 return_offsets_mapping=True)["offset_mapping"]
        spans = []
        for text, mapping, length in zip(full, offsets, attention_mask.sum(1).tolist()):
            if len(mapping) != length:
                raise ValueError(f"sentence spans: {len(mapping)} token offsets for a passage of {length} tokens")
            spans.append(token_spans(mapping, sentence_spans(text, split_sentences(text))))
        lengths = torch.tensor([len(s) for s in spans], dtype=torch.long)
        width = int(lengths.max()) if len(spans) else 0
        return {"sentence_starts": pad_sequences([[a for a, _ in s] for s in spans], 0),
                "sentence_ends": pad_sequences([[b for _, b in s] for s in spans], 1),
                "sentence_mask": torch.arange(width)[None, :] < lengths[:, None]}


def read_only_viewer_mask(attention_mask: torch.Tensor, num_text: int, dtype: torch.dtype,
                          scope: str = "full") -> torch.Tensor:
    """(B, 1, T, T) additive attention mask for text tokens followed by viewer tokens: text attends to the
    (unpadded) text only — so its states equal a plain encoding's — and each viewer to the text and itself.

    ``scope='segments'`` (``--mvr_viewer_scope``): viewer i attends to itself and to the i-th of k contiguous,
    near-equal segments of the real text tokens instead, :func:`segment_mask`; the text rows are unchanged."""
    size, total = attention_mask.shape
    keys = attention_mask.bool()
    is_viewer = torch.arange(total, device=keys.device) >= num_text
    allowed = keys[:, None, :] & ~is_viewer[None, None, :]  # everyone sees the real text
    allowed = allowed | torch.eye(total, dtype=torch.bool, device=keys.device)[None] & is_viewer[None, :, None]
    if scope == "segments":
        viewers = total - num_text
        segments = segment_mask(keys[:, :num_text], viewers)  # (B, k, L)
        allowed = torch.cat([allowed[:, :num_text], torch.cat([segments, allowed[:, num_text:, num_text:]], 2)], 1)
    mask = torch.zeros(size, 1, total, total, dtype=dtype, device=keys.device)
    return mask.masked_fill(~allowed[:, None], torch.finfo(dtype).min)


def segment_mask(text_mask: torch.Tensor, num_segments: int) -> torch.Tensor:
    """(B, k, L) bool: which text tokens segment i of each passage holds. The n real tokens of a passage (ranked
    in order, so either padding side works) are cut into k contiguous segments, segment i = ranks
    floor(i·n/k) .. floor((i+1)·n/k) − 1; a segment that would be empty (n < k) holds the whole text instead."""
    text_mask = text_mask.bool()
    rank = text_mask.long().cumsum(1) - 1  # (B, L): position among the passage's real tokens
    n = text_mask.sum(1, keepdim=True)  # (B, 1)
    index = torch.arange(num_segments, device=text_mask.device)[None]  # (1, k)
    start, end = index * n // num_segments, (index + 1) * n // num_segments  # (B, k)
    inside = (rank[:, None] >= start[..., None]) & (rank[:, None] < end[..., None]) & text_mask[:, None]
    return torch.where((end > start)[..., None], inside, text_mask[:, None])


@register_encoder("mvr")
class MvrEncoder(MultiViewEncoder):
    """MVR: k viewer-token vectors per document, one viewer vector per query, max-over-views score.

    Options (:class:`MvrOptions`): ``mvr_num_views`` (k, default 8), ``mvr_lambda`` (local-loss weight, 0.01),
    ``mvr_alpha`` and ``mvr_min_temperature`` (annealing, 0.1 and 0.3), ``mvr_viewer_init`` ('random' as in the
    paper, or 'cls': copies of the [CLS] embedding plus small noise, so views are not identical), ``mvr_views``,
    ``mvr_gate_learning_rate``, ``mvr_viewer_positions``, ``mvr_balance_weight`` (the load-balancing term of
    :func:`~multiview_plugin.losses.global_local.view_balance_loss`, 0 = off), ``mvr_viewer_scope`` (residual
    views: each viewer reads the whole text, 'full', or its own contiguous segment of it, 'segments') and
    ``mvr_sentence_distill_weight`` (residual views: the sentence-coverage term of
    :func:`~multiview_plugin.losses.sentence_coverage.sentence_coverage_loss`, 0 = off).
    """

    default_loss = "mvr_global_local"
    default_temperature_schedule = "annealed"
    options_class = MvrOptions
    formatter_class = ViewerFormatter

    @property
    def options(self) -> MvrOptions:
        return self.config.options

    @classmethod
    def formatter_options(cls, config: EncoderConfig) -> dict[str, Any]:
        opts: MvrOptions = config.options
        return {"num_views": opts.num_views, "viewer_positions": opts.viewer_positions, "views": opts.views}

    @classmethod
    def annealing(cls, config: EncoderConfig) -> tuple[float, float]:
        opts: MvrOptions = config.options
        return opts.alpha, opts.min_temperature

    @classmethod
    def validate_config(cls, config: EncoderConfig) -> None:
        super().validate_config(config)
        opts: MvrOptions = config.options
        if opts.viewer_init not in ("random", "cls"):
            raise ConfigError(f"--mvr_viewer_init must be 'random' or 'cls', got {opts.viewer_init!r}")
        if opts.viewer_positions not in ("shared", "distinct"):
            raise ConfigError(f"--mvr_viewer_positions must be 'shared' or 'distinct', "
                              f"got {opts.viewer_positions!r}")
        if config.passage_max_len < 3 or config.query_max_len < 3:
            raise ConfigError("mvr needs --query_max_len and --passage_max_len of at least 3")
        views = opts.views
        if views not in VIEW_FORMS:
            raise ConfigError(f"--mvr_views must be one of {', '.join(VIEW_FORMS)}, got {views!r}")
        if views == "residual":
            if config.pooling not in ("cls", "mean"):
                raise ConfigError(f"--mvr_views residual pools the text with --pooling 'cls' or 'mean', "
                                  f"got {config.pooling!r}")
            if opts.viewer_positions != "shared":
                raise ConfigError("--mvr_viewer_positions has no effect with --mvr_views residual (its read-only "
                                  "viewers take positions 1..k): leave it out")
        elif opts.gate_learning_rate is not None:
            raise ConfigError("--mvr_gate_learning_rate applies to --mvr_views residual only")
        if opts.viewer_scope not in VIEWER_SCOPES:
            raise ConfigError(f"--mvr_viewer_scope must be one of {', '.join(VIEWER_SCOPES)}, "
                              f"got {opts.viewer_scope!r}")
        if opts.viewer_scope != "full" and views != "residual":
            raise ConfigError(f"--mvr_viewer_scope {opts.viewer_scope} applies to --mvr_views residual only "
                              f"(the paper's viewers are ordinary tokens of the sequence): leave it out")
        if not opts.balance_weight >= 0:
            raise ConfigError(f"--mvr_balance_weight must be >= 0, got {opts.balance_weight}")
        if opts.balance_weight and (config.loss_name or cls.default_loss) != cls.default_loss:
            raise ConfigError(f"--mvr_balance_weight is a term of the {cls.default_loss} loss, not of "
                              f"--loss_name {config.loss_name}: leave one of them out")
        distill = opts.sentence_distill_weight
        if not (math.isfinite(distill) and distill >= 0):
            raise ConfigError(f"--mvr_sentence_distill_weight must be a finite number >= 0, got {distill}")
        if distill and views != "residual":
            raise ConfigError(f"--mvr_sentence_distill_weight {distill} applies to --mvr_views residual only (it "
                              f"distils the residual views toward the passage's sentence vectors): leave it out")

    @classmethod
    def prepare_backbone(
        cls,
        config: EncoderConfig,
        tokenizer: PreTrainedTokenizerBase,
        query_encoder: PreTrainedModel,
        passage_encoder: PreTrainedModel,
    ) -> None:
        tokens = [QUERY_VIEWER, *viewer_tokens(config.options.num_views)]
        # "Randomly initialised" (paper §3.2), at the scale of the backbone's own word embeddings
        add_marker_tokens(tokenizer, [query_encoder, passage_encoder], tokens, init=config.options.viewer_init)

    @classmethod
    def build(cls, model_args: Any, data_args: Any) -> MultiViewEncoder:
        model = super().build(model_args, data_args)
        if model.config.options.views == "paper":
            similarity = model.viewer_similarity()
            if similarity >= COLLAPSE_COSINE:
                logger.warning(
                    "mvr: the %d viewer states of this backbone are nearly identical before training (mean "
                    "pairwise cosine %.4f >= %.2f): the views have collapsed into one and max-sim cannot tell them "
                    "apart. Mean-pooled backbones (e.g. all-MiniLM-L6-v2) do this at the shared position 0; use "
                    "--mvr_views residual (recommended for them) or --mvr_viewer_positions distinct.",
                    model.config.options.num_views, similarity, COLLAPSE_COSINE)
        return model

    @torch.inference_mode()
    def viewer_similarity(self, texts: Sequence[str] = PROBE_TEXTS) -> float:
        """Mean pairwise cosine of the k document views over ``texts`` (1.0: the views are one vector)."""
        k = self.options.num_views
        if k < 2:
            return 0.0
        was_training = self.training
        self.eval()
        try:
            batch = self.formatter.passages(list(texts))
            device = next(self.parameters()).device
            reps, _ = self.encode_passage({key: v.to(device) for key, v in batch.items()})
        finally:
            self.train(was_training)
        unit = torch.nn.functional.normalize(reps.float(), dim=-1)
        cosine = unit @ unit.transpose(1, 2)  # (B, k, k)
        off_diagonal = ~torch.eye(k, dtype=torch.bool, device=cosine.device)
        return float(cosine[:, off_diagonal].mean())

    def __init__(self, config: EncoderConfig, *args: Any, **kwargs: Any):
        super().__init__(config, *args, **kwargs)
        k = self.options.num_views
        if self.options.views == "residual":
            self.view_gates = nn.Parameter(torch.zeros(k))
        limit = getattr(self.p_encoder.config, "max_position_embeddings", None)
        if self.options.viewer_positions == "distinct" and limit is not None:
            needed = config.passage_max_len - 1 + k  # positions 0..k-1 for viewers, then text and [SEP]
            if needed > limit:
                raise ConfigError(f"--mvr_viewer_positions distinct needs {needed} positions "
                                  f"(--passage_max_len - 1 + k) but the backbone has {limit}")

    @property
    def residual(self) -> bool:
        return self.options.views == "residual"

    def learning_rate_overrides(self) -> dict[str, float]:
        if not self.residual:
            return {}
        lr = self.options.gate_learning_rate
        return {"view_gates": DEFAULT_GATE_LEARNING_RATE if lr is None else lr}

    def encode_query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.residual:  # pooled like dpr's
            return super().encode_query(batch)
        return self._finish(self._last_hidden(self.query_encoder, batch)[:, 0])

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.options.num_views
        if self.residual:
            reps, _ = self._residual_views(batch)
        else:
            reps = self._finish(self._last_hidden(self.p_encoder, batch)[:, :k])
        return reps, torch.ones(reps.shape[:2], dtype=torch.bool, device=reps.device)

    def _residual_views(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual views (B, k, D), finished, and the last-layer states of the text tokens (B, L, H)."""
        batch = dict(batch)
        num_text = int(batch.pop("num_text_tokens"))
        text_mask = batch["attention_mask"][:, :num_text]
        dtype = self.p_encoder.dtype
        batch["attention_mask"] = read_only_viewer_mask(batch["attention_mask"], num_text, dtype,
                                                        self.options.viewer_scope)
        hidden = self._last_hidden(self.p_encoder, batch)
        text = self._pool(hidden[:, :num_text], text_mask)  # exactly dpr's passage vector, before _finish
        views = text.unsqueeze(1) + self.view_gates.to(hidden.dtype)[None, :, None] * hidden[:, num_text:]
        return self._finish(views), hidden[:, :num_text]

    def train_collator(self) -> Any:
        """With ``mvr_sentence_distill_weight`` > 0 the training passages also carry their sentences' token spans
        (:meth:`ViewerFormatter.sentence_token_spans`); the model's own formatter, for encoding, never does."""
        collator = super().train_collator()
        collator.formatter.sentence_spans = self.options.sentence_distill_weight > 0
        return collator

    def forward(self, query: dict[str, torch.Tensor] | None = None, passage: dict[str, torch.Tensor] | None = None,
                passage_keys: torch.Tensor | None = None) -> EncoderOutput:
        """With sentence spans in ``passage`` (the training collator's, ``mvr_sentence_distill_weight`` > 0), the
        loss also holds w · the sentence-coverage term of the training passages, logged as ``loss_distill``."""
        if passage is None or "sentence_starts" not in passage:
            return super().forward(query, passage, passage_keys)
        passage = dict(passage)
        starts, ends, sentence_mask = (passage.pop(key) for key in SENTENCE_SPAN_KEYS)
        if not self.training:
            return super().forward(query, passage, passage_keys)
        if query is None:
            raise ConfigError("--mvr_sentence_distill_weight needs each batch in one forward pass: not with "
                              "--grad_cache")
        q_reps = self.encode_query(query)
        p_reps, text_hidden = self._residual_views(passage)
        out = self.loss_from_reps(q_reps, p_reps, torch.ones(p_reps.shape[:2], dtype=torch.bool,
                                                             device=p_reps.device), passage_keys=passage_keys)
        teachers = self._finish(span_means(text_hidden, starts, ends))  # detached by the loss
        loss_distill = sentence_coverage_loss(p_reps, teachers, sentence_mask=sentence_mask)
        out.loss = out.loss + self.options.sentence_distill_weight * loss_distill.to(out.loss.dtype)
        out.parts["loss_distill"] = loss_distill.detach()
        return out

    def describe_views(self) -> dict[str, Any]:
        return {"kind": "viewer", "labels": viewer_tokens(self.options.num_views)}
