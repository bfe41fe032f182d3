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

Views that differ from step 0 (issue 32). With the defaults every residual view starts as dpr's vector, so every
view-level loss sits at its symmetric value and nothing pushes the views apart. Three levers break the symmetry:

* ``mvr_view_init`` sets view i's *base* b_i in v_i = b_i + g_i · h(viewer i) (:meth:`MvrEncoder.view_bases`);
  with g_i = 0 at step 0, v_i = b_i. 'none': b_i = pool(text) (the form above). Otherwise b_i = (1/|R_i|)
  Σ_{t ∈ R_i} h_t, the mean of the text token states over a region R_i, and pool(text) where R_i is empty:
  'sentences', R_i = sentence i (:func:`sentence_regions`: the last view takes sentences k..S of a longer
  passage; spare views of a shorter one are pool(text)); 'segments', R_i = the i-th contiguous segment
  (:func:`segment_mask`); 'kmeans', R_i = cluster i of a spherical k-means of the token states
  (:func:`kmeans_members`). The score stays max_i <q, v_i>, so a query about one sentence can match that
  sentence's view from the first step; a passage is still k vectors.
* ``mvr_views='region'`` is the name of the residual form with a region ``mvr_view_init`` (it requires one):
  "segment views + MVR viewers" with 'segments', view i = normalise(mean of segment i's token states + g_i · h(VIE_i)),
  g_i = 0 at step 0 — region pooling with a gated viewer residual, not the paper's MVR (``'paper'`` stays the
  reference). It computes exactly what ``'residual'`` with the same ``mvr_view_init`` computes, so models saved
  that way load and score as before. ``mvr_viewers='off'`` (region only) is its ablation: no viewer tokens, no
  gates, view i = normalise(mean of region i) — what the viewers add is the difference.
* ``mvr_init_from`` starts the backbone and tokenizer from a saved model (a staged start: a trained dcsr-mean
  model, or a dpr ``--pooling cls`` model for the paper form) before the viewer tokens are added.
* ``mvr_diversity_weight`` w adds w · L_div, L_div = mean over passages of (1/(k(k−1))) Σ_{i≠j} cos(v_i, v_j)
  (:func:`view_diversity_loss`), logged as ``loss_diversity``.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from multiview_plugin.data.sentences import sentence_spans, split_sentences, token_spans
from multiview_plugin.errors import ConfigError
from multiview_plugin.losses.sentence_coverage import sentence_coverage_loss
from multiview_plugin.modeling.base import EncoderOutput, MultiViewEncoder, backbone_options
from multiview_plugin.modeling.config import CONFIG_NAME, EncoderConfig, is_multiview_model
from multiview_plugin.modeling.dcsr import span_means
from multiview_plugin.modeling.formatting import InputFormatter, pad_sequences
from multiview_plugin.modeling.method_options import (
    DEFAULT_GATE_LEARNING_RATE,
    REGION_INITS,
    RESIDUAL_FORMS,
    VIEW_FORMS,
    VIEW_INITS,
    VIEWER_SCOPES,
    VIEWERS,
    MvrOptions,
)
from multiview_plugin.modeling.persistence import load_encoder
from multiview_plugin.modeling.tokens import add_marker_tokens, token_ids
from multiview_plugin.registry import register_encoder

logger = logging.getLogger(__name__)

QUERY_VIEWER = "[VIE]"
KMEANS_ITERATIONS = 5
SENTENCE_SPAN_KEYS = ("sentence_starts", "sentence_ends", "sentence_mask")  # dcsr's mean-pooling layout
COLLAPSE_COSINE = 0.99
# A few neutral passages to probe the viewer states of a freshly built model (the collapse guard).
PROBE_TEXTS = ("The river flows north through the old city before it reaches the sea.",
               "In 1850 the company built a railway line between the two largest towns.",
               "The festival is held every summer and attracts musicians from many countries.",
               "Its highest mountain was first climbed by a team of three in the winter.")


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
                 views: str = "paper", sentence_spans: bool = False, viewers: str = "on", **kwargs: Any):
        super().__init__(tokenizer, **kwargs)
        self.num_views = num_views
        self.viewer_positions = viewer_positions
        self.views = views
        self.viewers = viewers  # 'off' (--mvr_viewers off): residual passages carry no viewer tokens
        self.sentence_spans = sentence_spans  # residual passages also carry their sentences' token spans
        ids = token_ids(tokenizer, [QUERY_VIEWER, *viewer_tokens(num_views)], "mvr")
        self.query_viewer_id, self.viewer_ids = ids[0], ids[1:]

    def queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.views in RESIDUAL_FORMS:  # queries exactly as dpr's
            return super().queries(texts)
        end = self.end_token_id()
        body = self.tokenize_plain([self.query_prefix + t for t in texts], self.query_max_len - 2)
        seqs = [[self.query_viewer_id, *ids, end] for ids in body]
        return self.assemble(seqs, [list(range(len(s))) for s in seqs])

    def passages(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        if self.views in RESIDUAL_FORMS:
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
        positions 1..k, attention-mask 1; ``num_text_tokens`` = L tells the model where the viewers start. With
        ``viewers='off'`` nothing is appended (k = 0): dpr's passage batch, plus ``num_text_tokens``."""
        batch = super().passages(texts)
        size, k = batch["input_ids"].shape[0], (self.num_views if self.viewers == "on" else 0)
        text_len = batch["input_ids"].shape[1]
        viewers = torch.tensor(self.viewer_ids[:k], dtype=torch.long).expand(size, k)
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
            raise ConfigError("--mvr_sentence_distill_weight and --mvr_view_init sentences need a fast tokenizer "
                              f"(its character offsets), got {type(self.tokenizer).__name__}")
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


def sentence_regions(starts: torch.Tensor, ends: torch.Tensor, sentence_mask: torch.Tensor,
                     num_views: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``--mvr_view_init sentences``: the token span [start, end) of view i's sentence, (B, k) each, and whether
    view i has one, from the passages' sentence spans (B, S) (:meth:`ViewerFormatter.sentence_token_spans`).
    View i < k−1 takes sentence i; the last view takes sentences k..S together (from the start of sentence k to
    the end of the last one) when a passage has more than k; a view past a passage's last sentence has none."""
    k = num_views
    size, width = starts.shape
    if width < k:  # pad to k columns: no sentence there
        pad = k - width
        starts = torch.nn.functional.pad(starts, (0, pad))
        ends = torch.nn.functional.pad(ends, (0, pad), value=1)
        sentence_mask = torch.nn.functional.pad(sentence_mask, (0, pad))
    count = sentence_mask.long().sum(1)  # (B,)
    last_end = ends.gather(1, (count - 1).clamp(min=0)[:, None])[:, 0]
    region_ends = ends[:, :k].clone()
    region_ends[:, k - 1] = torch.where(count > k, last_end, region_ends[:, k - 1])
    return starts[:, :k], region_ends, sentence_mask[:, :k].bool()


def view_diversity_loss(views: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``--mvr_diversity_weight``: the mean pairwise cosine of each passage's views (B, k, D), off the diagonal
    (over its real views where ``mask`` (B, k) is given), averaged over the passages that have two or more; 1
    when a passage's views are one direction, 0 when they are orthogonal, below 0 when they point apart."""
    unit = torch.nn.functional.normalize(views.float(), dim=-1)
    cosine = unit @ unit.transpose(1, 2)  # (B, k, k)
    k = views.shape[1]
    real = torch.ones(views.shape[:2], dtype=torch.bool, device=views.device) if mask is None else mask.bool()
    pairs = real[:, :, None] & real[:, None, :] & ~torch.eye(k, dtype=torch.bool, device=views.device)
    counts = pairs.sum((1, 2))
    per_passage = (cosine * pairs).sum((1, 2)) / counts.clamp(min=1)
    used = counts > 0
    return per_passage[used].mean() if bool(used.any()) else cosine.new_zeros(())


def masked_means(hidden: torch.Tensor, members: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, k, H) means of the states ``hidden`` (B, L, H) over each region's tokens ``members`` (B, k, L), and
    (B, k) whether a region has any token."""
    weights = members.to(hidden.dtype)
    counts = weights.sum(-1, keepdim=True)
    return weights @ hidden / counts.clamp(min=1), counts[..., 0] > 0


def kmeans_members(hidden: torch.Tensor, text_mask: torch.Tensor, num_views: int,
                   iterations: int = KMEANS_ITERATIONS) -> torch.Tensor:
    """``--mvr_view_init kmeans``: (B, k, L) bool, which real tokens fall in cluster i of a spherical k-means of
    each passage's token states (cosine to unit centroids), started from the k contiguous segments of
    :func:`segment_mask` and run ``iterations`` Lloyd steps: deterministic and without gradient (the view bases
    are then differentiable means over the clusters). A cluster left empty keeps its previous centroid."""
    text_mask = text_mask.bool()
    with torch.no_grad():
        unit = torch.nn.functional.normalize(hidden.detach().float(), dim=-1)
        members = segment_mask(text_mask, num_views)
        centroids = torch.nn.functional.normalize(members.float() @ unit, dim=-1)
        clusters = torch.arange(num_views, device=hidden.device)[None, :, None]
        for _ in range(iterations):
            nearest = (unit @ centroids.transpose(1, 2)).argmax(-1)  # (B, L)
            members = (nearest[:, None, :] == clusters) & text_mask[:, None]
            centroids = torch.where(members.any(-1, keepdim=True),
                                    torch.nn.functional.normalize(members.float() @ unit, dim=-1), centroids)
    return members


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
    :func:`~multiview_plugin.losses.sentence_coverage.sentence_coverage_loss`, 0 = off), ``mvr_view_init``
    (residual views: where each view starts, :meth:`view_bases`), ``mvr_init_from`` (a staged start from a saved
    model) and ``mvr_diversity_weight`` (the term of :func:`view_diversity_loss`, 0 = off).
    """

    default_loss = "mvr_global_local"
    default_temperature_schedule = "annealed"
    annealing_flags = ("--mvr_alpha", "--mvr_min_temperature")
    options_class = MvrOptions
    formatter_class = ViewerFormatter

    @property
    def options(self) -> MvrOptions:
        return self.config.options

    @classmethod
    def formatter_options(cls, config: EncoderConfig) -> dict[str, Any]:
        opts: MvrOptions = config.options
        return {"num_views": opts.num_views, "viewer_positions": opts.viewer_positions, "views": opts.views,
                "sentence_spans": opts.view_init == "sentences", "viewers": opts.viewers}

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
        if views in RESIDUAL_FORMS:
            if config.pooling not in ("cls", "mean"):
                raise ConfigError(f"--mvr_views residual pools the text with --pooling 'cls' or 'mean', "
                                  f"got {config.pooling!r}")
            if opts.viewer_positions != "shared":
                raise ConfigError("--mvr_viewer_positions has no effect with --mvr_views residual (its read-only "
                                  "viewers take positions 1..k): leave it out")
        elif opts.gate_learning_rate is not None:
            raise ConfigError("--mvr_gate_learning_rate applies to --mvr_views residual or region only")
        if views == "region" and opts.view_init not in REGION_INITS:
            raise ConfigError(f"--mvr_views region needs --mvr_view_init {' or '.join(REGION_INITS)} (the regions "
                              f"whose means are the views), got {opts.view_init!r}")
        if opts.viewers not in VIEWERS:
            raise ConfigError(f"--mvr_viewers must be one of {', '.join(VIEWERS)}, got {opts.viewers!r}")
        if opts.viewers == "off":
            if views != "region":
                raise ConfigError(f"--mvr_viewers off is the viewers-off ablation of --mvr_views region (got "
                                  f"--mvr_views {views}): leave it out")
            needless = [flag for flag, used in (("--mvr_gate_learning_rate", opts.gate_learning_rate is not None),
                                                ("--mvr_viewer_scope", opts.viewer_scope != "full"))
                        if used]
            if needless:
                raise ConfigError(f"{' and '.join(needless)}: no viewers or gates with --mvr_viewers off: "
                                  "leave it out")
        if opts.viewer_scope not in VIEWER_SCOPES:
            raise ConfigError(f"--mvr_viewer_scope must be one of {', '.join(VIEWER_SCOPES)}, "
                              f"got {opts.viewer_scope!r}")
        if opts.viewer_scope != "full" and views not in RESIDUAL_FORMS:
            raise ConfigError(f"--mvr_viewer_scope {opts.viewer_scope} applies to --mvr_views residual or region only "
                              f"(the paper's viewers are ordinary tokens of the sequence): leave it out")
        if not opts.balance_weight >= 0:
            raise ConfigError(f"--mvr_balance_weight must be >= 0, got {opts.balance_weight}")
        if opts.balance_weight and (config.loss_name or cls.default_loss) != cls.default_loss:
            raise ConfigError(f"--mvr_balance_weight is a term of the {cls.default_loss} loss, not of "
                              f"--loss_name {config.loss_name}: leave one of them out")
        distill = opts.sentence_distill_weight
        if not (math.isfinite(distill) and distill >= 0):
            raise ConfigError(f"--mvr_sentence_distill_weight must be a finite number >= 0, got {distill}")
        if distill and views not in RESIDUAL_FORMS:
            raise ConfigError(f"--mvr_sentence_distill_weight {distill} applies to --mvr_views residual or region "
                              f"only (it distils the residual views toward the passage's sentence vectors): leave it "
                              "out")
        if opts.view_init not in VIEW_INITS:
            raise ConfigError(f"--mvr_view_init must be one of {', '.join(VIEW_INITS)}, got {opts.view_init!r}")
        if opts.view_init != "none" and views not in RESIDUAL_FORMS:
            raise ConfigError(f"--mvr_view_init {opts.view_init} applies to --mvr_views residual or region only "
                              f"(it sets the residual views' bases; the paper's views are viewer states): leave it out")
        diversity = opts.diversity_weight
        if not (math.isfinite(diversity) and diversity >= 0):
            raise ConfigError(f"--mvr_diversity_weight must be a finite number >= 0, got {diversity}")
        if diversity and opts.num_views < 2:
            raise ConfigError(f"--mvr_diversity_weight {diversity} needs --mvr_num_views >= 2 (it compares a "
                              f"passage's views pairwise)")
        if opts.init_from is not None and not opts.init_from:
            raise ConfigError("--mvr_init_from is empty: give a saved model folder or leave it out")

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
    def load_pretrained(cls, config: EncoderConfig, model_args: Any) -> tuple[PreTrainedTokenizerBase,
                                                                              PreTrainedModel, PreTrainedModel]:
        """``--mvr_init_from PATH``: the tokenizer and backbone(s) of the model saved at PATH (a staged start;
        the viewer tokens are added afterwards by :meth:`prepare_backbone`); without it, the default."""
        source = config.options.init_from
        if source is None:
            return super().load_pretrained(config, model_args)
        if not is_multiview_model(source):
            raise ConfigError(f"--mvr_init_from {source}: not a model folder saved by this package (no "
                              f"{CONFIG_NAME} there)")
        own = [f"--{name}" for name in ("config_name", "tokenizer_name") if getattr(model_args, name, None)]
        if own:
            raise ConfigError(f"{' and '.join(own)}: --mvr_init_from {source} brings its own backbone config and "
                              "tokenizer; drop the flag")
        saved = load_encoder(source, **backbone_options(model_args))
        if saved.config.model_name == cls.registered_name:
            raise ConfigError(f"--mvr_init_from {source} holds an mvr model already: to keep training it, pass it "
                              "as --model_name_or_path instead")
        untied = saved.passage_encoder is not None
        if untied and not config.untie_encoder:
            raise ConfigError(f"--mvr_init_from {source} has separate query and passage encoders: add "
                              "--untie_encoder")
        if saved.is_lora:  # never: a saved LoRA model loads merged
            raise ConfigError(f"--mvr_init_from {source}: loaded with LoRA adapters; merge them first")
        if saved.config.backbone != config.backbone:
            logger.warning("mvr: --mvr_init_from %s was trained from %s, not --model_name_or_path %s: its backbone "
                           "and tokenizer are used", source, saved.config.backbone, config.backbone)
        logger.info("mvr: starting from the %s model at %s (its backbone and tokenizer; pooling %s)",
                    saved.config.model_name, source, saved.config.pooling)
        query_encoder = saved.query_encoder
        if untied:
            passage_encoder = saved.passage_encoder
        else:
            passage_encoder = copy.deepcopy(query_encoder) if config.untie_encoder else query_encoder
        return saved.tokenizer, query_encoder, passage_encoder

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
        if self.residual and self.viewers_on:
            self.view_gates = nn.Parameter(torch.zeros(k))
        limit = getattr(self.p_encoder.config, "max_position_embeddings", None)
        if self.options.viewer_positions == "distinct" and limit is not None:
            needed = config.passage_max_len - 1 + k  # positions 0..k-1 for viewers, then text and [SEP]
            if needed > limit:
                raise ConfigError(f"--mvr_viewer_positions distinct needs {needed} positions "
                                  f"(--passage_max_len - 1 + k) but the backbone has {limit}")

    @property
    def residual(self) -> bool:
        """The dpr-encoded text with region or pooled bases (``--mvr_views residual`` or ``region``)."""
        return self.options.views in RESIDUAL_FORMS

    @property
    def viewers_on(self) -> bool:
        """False for the viewers-off ablation (``--mvr_viewers off``): views are the bases alone, no gates."""
        return self.options.viewers == "on"

    def learning_rate_overrides(self) -> dict[str, float]:
        if not (self.residual and self.viewers_on):
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
        """The residual views (B, k, D), finished, and the last-layer states of the text tokens (B, L, H).
        Sentence spans in ``batch`` are read by ``--mvr_view_init sentences`` and otherwise ignored."""
        batch = dict(batch)
        spans = [batch.pop(key, None) for key in SENTENCE_SPAN_KEYS]
        num_text = int(batch.pop("num_text_tokens"))
        text_mask = batch["attention_mask"][:, :num_text]
        if not self.viewers_on:  # the batch is dpr's text alone; the views are the region means
            text_hidden = self._last_hidden(self.p_encoder, batch)
            return self._finish(self.view_bases(text_hidden, text_mask, *spans)), text_hidden
        dtype = self.p_encoder.dtype
        batch["attention_mask"] = read_only_viewer_mask(batch["attention_mask"], num_text, dtype,
                                                        self.options.viewer_scope)
        hidden = self._last_hidden(self.p_encoder, batch)
        text_hidden = hidden[:, :num_text]
        bases = self.view_bases(text_hidden, text_mask, *spans)
        views = bases + self.view_gates.to(hidden.dtype)[None, :, None] * hidden[:, num_text:]
        return self._finish(views), text_hidden

    def view_bases(self, text_hidden: torch.Tensor, text_mask: torch.Tensor,
                   starts: torch.Tensor | None = None, ends: torch.Tensor | None = None,
                   sentence_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The residual views' bases b_i, (B, k, H), before :meth:`_finish` (``--mvr_view_init``): pool(text),
        exactly dpr's passage vector, for every view ('none'), or the mean of view i's region of the text —
        its sentence, its segment or its k-means cluster — where it has one, else pool(text)."""
        k = self.options.num_views
        text = self._pool(text_hidden, text_mask).unsqueeze(1)  # (B, 1, H)
        how = self.options.view_init
        if how == "none":
            return text.expand(-1, k, -1)
        if how == "sentences":
            if starts is None:
                raise ConfigError("--mvr_view_init sentences: this passage batch has no sentence spans (build it "
                                  "with the model's own formatter)")
            region_starts, region_ends, has = sentence_regions(starts.to(text_hidden.device),
                                                               ends.to(text_hidden.device),
                                                               sentence_mask.to(text_hidden.device), k)
            regions = span_means(text_hidden, region_starts, region_ends)
        elif how == "segments":
            regions, has = masked_means(text_hidden, segment_mask(text_mask, k))
        else:  # kmeans
            regions, has = masked_means(text_hidden, kmeans_members(text_hidden, text_mask, k))
        return torch.where(has[..., None], regions, text)

    def train_collator(self) -> Any:
        """With ``mvr_sentence_distill_weight`` > 0 the training passages also carry their sentences' token spans
        (:meth:`ViewerFormatter.sentence_token_spans`); the model's own formatter, for encoding, never does."""
        collator = super().train_collator()
        collator.formatter.sentence_spans = (self.options.sentence_distill_weight > 0
                                             or self.options.view_init == "sentences")
        return collator

    def forward(self, query: dict[str, torch.Tensor] | None = None, passage: dict[str, torch.Tensor] | None = None,
                passage_keys: torch.Tensor | None = None) -> EncoderOutput:
        """With sentence spans in ``passage`` (the training collator's, ``mvr_sentence_distill_weight`` > 0), the
        loss also holds w · the sentence-coverage term of the training passages, logged as ``loss_distill``."""
        distill = self.options.sentence_distill_weight
        if passage is None or "sentence_starts" not in passage or not distill or not self.training:
            return super().forward(query, passage, passage_keys)  # the views read the spans they need
        starts, ends, sentence_mask = (passage[key] for key in SENTENCE_SPAN_KEYS)
        if query is None:
            raise ConfigError("--mvr_sentence_distill_weight needs each batch in one forward pass: not with "
                              "--grad_cache")
        q_reps = self.encode_query(query)
        p_reps, text_hidden = self._residual_views(passage)
        out = self.loss_from_reps(q_reps, p_reps, torch.ones(p_reps.shape[:2], dtype=torch.bool,
                                                             device=p_reps.device), passage_keys=passage_keys)
        teachers = self._finish(span_means(text_hidden, starts, ends))  # detached by the loss
        loss_distill = sentence_coverage_loss(p_reps, teachers, sentence_mask=sentence_mask)
        out.loss = out.loss + distill * loss_distill.to(out.loss.dtype)
        out.parts["loss_distill"] = loss_distill.detach()
        return out

    def loss_from_reps(self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor,
                       passage_keys: torch.Tensor | None = None, **inputs: Any) -> EncoderOutput:
        """With ``mvr_diversity_weight`` w > 0 the loss also holds w · :func:`view_diversity_loss` of the batch's
        passages, logged as ``loss_diversity`` (also under ``--grad_cache``, which calls this on cached vectors)."""
        out = super().loss_from_reps(q_reps, p_reps, p_mask, passage_keys=passage_keys, **inputs)
        weight = self.options.diversity_weight
        if weight:
            loss_diversity = view_diversity_loss(p_reps, p_mask)
            out.loss = out.loss + weight * loss_diversity.to(out.loss.dtype)
            out.parts["loss_diversity"] = loss_diversity.detach()
        return out

    def describe_views(self) -> dict[str, Any]:
        return {"kind": "viewer", "labels": viewer_tokens(self.options.num_views)}
