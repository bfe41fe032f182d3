"""DCSR (Wu et al., 2022, "Sentence-aware Contrastive Learning for Open-Domain Passage Retrieval").

A passage is split into sentences and encoded as a whole, ``[CLS] <sent> s1 <sent> s2 ... [SEP]``; the
last-layer state of each ``<sent>`` marker is one contextual sentence vector, so documents have a variable
number of views. Queries are encoded like DPR's. ``dcsr_sentence_pooling`` (see :data:`SENTENCE_POOLINGS`)
reads the sentence vectors another way: ``mean`` — the mean of each sentence's own token states in the
whole-passage encoding ``[CLS] s1 s2 ... [SEP]`` (no markers, so a mean-pooled backbone needs no new token);
``independent`` — each sentence encoded alone, ``[CLS] s_i [SEP]``, mean-pooled (the no-context
baseline). Training is at the sentence level (see
:mod:`multiview_plugin.data.sentence_dataset`); retrieval ranks passages by HasAns (paper eq. 2, the
``hasans`` aggregator) or by their best sentence (``max``). ``dcsr_train_unit passage`` trains on whole
passages instead, each scored by its best sentence (the same max-sim loss as MVR and ME-BERT), for data whose
positive sentence would have to be guessed (no answer strings). ``dcsr_passage_view`` adds the whole passage,
pooled like DPR from the same encoding, as one more view after the sentences (sentence j stays view j).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from multiview_plugin.data.sentences import sentence_spans, split_sentences
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.base import EncoderOutput, MultiViewEncoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.formatting import InputFormatter, pad_sequences
from multiview_plugin.modeling.method_options import SENTENCE_POOLINGS, TRAIN_UNITS, DcsrOptions
from multiview_plugin.modeling.tokens import add_marker_tokens, token_ids
from multiview_plugin.registry import register_encoder

SENT_MARKER = "<sent>"


class SentenceFormatter(InputFormatter):
    """Builds ``[CLS] <sent> s1 <sent> s2 ... [SEP]`` within ``passage_max_len`` positions (``marker``
    pooling; ``mean`` leaves the markers out, ``independent`` makes one ``[CLS] s_i [SEP]`` row per sentence).

    A sentence is kept when its marker and at least one of its tokens fit; the last kept sentence may be cut
    short (*truncated*, still one vector) and the sentences after it are *dropped* (no vector). Both are
    counted in :attr:`stats` by :meth:`passages`, so the encode driver can report them. Every pooling keeps
    the sentences that fit in the whole-passage layout, so they all index the same text.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, sentence_pooling: str = "marker", **kwargs: Any):
        super().__init__(tokenizer, **kwargs)
        self.sentence_pooling = sentence_pooling
        self.uses_markers = sentence_pooling == "marker"
        self.marker_id = token_ids(tokenizer, [SENT_MARKER], "dcsr")[0] if self.uses_markers else None
        self.start_ids = [tokenizer.cls_token_id] if tokenizer.cls_token_id is not None else []
        if self.passage_max_len < len(self.start_ids) + 3:
            raise ConfigError(f"dcsr needs --passage_max_len >= {len(self.start_ids) + 3} "
                              "(start, one marker, one token, end)")
        self.stats: Counter[str] = Counter()

    def split(self, text: str) -> tuple[str, ...]:
        return split_sentences(self.passage_prefix + text)

    def plan(self, sentence_lists: Sequence[Sequence[str]]) -> list[list[list[int]]]:
        """For each passage, the token ids of each kept sentence (a cut sentence holds its kept prefix).

        One batched tokenizer call for all sentences of all passages.
        """
        return self._plan(sentence_lists)[0]

    def _plan(self, sentence_lists: Sequence[Sequence[str]]) -> tuple[list[list[list[int]]], int]:
        flat = [s for sentences in sentence_lists for s in sentences]
        ids = self.tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
        # room for markers and tokens: the start and end tokens take the other positions
        budget = self.passage_max_len - len(self.start_ids) - 1
        marker = int(self.uses_markers)
        plans, pos, truncated = [], 0, 0
        for sentences in sentence_lists:
            used, kept = 0, []
            for tokens in ids[pos:pos + len(sentences)]:
                if not tokens:
                    tokens = [self.tokenizer.unk_token_id or 0]  # a sentence the tokenizer drops entirely
                room = budget - used - marker
                if room < 1:
                    break
                kept.append(tokens[:room])
                truncated += len(tokens) > room
                used += marker + len(kept[-1])
            plans.append(kept)
            pos += len(sentences)
        return plans, truncated

    def build(self, plans: Sequence[Sequence[Sequence[int]]]) -> dict[str, torch.Tensor]:
        """Model inputs plus ``sentence_mask`` (B, S) and where each sentence's vector comes from:
        ``sentence_positions`` (B, S) — the ``<sent>`` markers (marker pooling); ``sentence_starts`` and
        ``sentence_ends`` (B, S) — each sentence's token span (mean); ``sentence_rows`` (B, S) — its row of the
        flattened one-sentence-per-row batch (independent)."""
        end = self.end_token_id()
        lengths = torch.tensor([len(kept) for kept in plans])
        if self.sentence_pooling == "independent":
            sequences = [[*self.start_ids, *tokens, end] for kept in plans for tokens in kept]
            batch = self.assemble(sequences) if sequences else self.assemble([[*self.start_ids, end]])
            starts = torch.cumsum(lengths, 0) - lengths
            rows = [list(range(int(a), int(a) + int(n))) for a, n in zip(starts, lengths)]
            batch["sentence_rows"] = pad_sequences(rows, 0)
        else:
            sequences, spans = [], []
            for kept in plans:
                seq, where = list(self.start_ids), []
                for tokens in kept:
                    if self.uses_markers:
                        where.append(len(seq))
                        seq.append(self.marker_id)
                        seq.extend(tokens)
                    else:
                        where.append((len(seq), len(seq) + len(tokens)))
                        seq.extend(tokens)
                seq.append(end)
                sequences.append(seq)
                spans.append(where)
            batch = self.assemble(sequences)
            if self.uses_markers:
                batch["sentence_positions"] = pad_sequences(spans, 0)
            else:
                batch["sentence_starts"] = pad_sequences([[a for a, _ in w] for w in spans], 0)
                batch["sentence_ends"] = pad_sequences([[b for _, b in w] for w in spans], 1)
        width = int(lengths.max()) if len(lengths) else 0
        batch["sentence_mask"] = torch.arange(width)[None, :] < lengths[:, None]
        return batch

    def passages(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        sentence_lists = [self.split(t) for t in texts]
        plans, truncated = self._plan(sentence_lists)
        total, kept = sum(map(len, sentence_lists)), sum(map(len, plans))
        self.stats.update(passages=len(texts), sentences=total, kept=kept, dropped=total - kept, truncated=truncated)
        return self.build(plans)


def span_means(hidden: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """(B, S, H) means of the token states ``hidden`` (B, L, H) over each span [start, end) of ``starts`` and
    ``ends`` (B, S), via prefix sums; an empty span (a padded sentence: 0, 1 or start = end) divides by 1.
    ``--dcsr_sentence_pooling mean``'s sentence vectors, and MVR's sentence teachers
    (``--mvr_sentence_distill_weight``)."""
    prefix = torch.nn.functional.pad(hidden.cumsum(1), (0, 0, 1, 0))  # prefix[:, t] = sum of states < t
    size = hidden.shape[-1]
    total = (prefix.gather(1, ends.unsqueeze(-1).expand(-1, -1, size))
             - prefix.gather(1, starts.unsqueeze(-1).expand(-1, -1, size)))
    return total / (ends - starts).clamp(min=1).unsqueeze(-1).to(total.dtype)


@register_encoder("dcsr")
class DcsrEncoder(MultiViewEncoder):
    """DCSR: one vector per ``<sent>`` marker of the whole-passage encoding; queries pooled like DPR.

    Options (:class:`DcsrOptions`): ``dcsr_in_passage_negatives`` and ``dcsr_bm25_negatives`` (sentence negatives
    per query, paper best 1 and 1), ``dcsr_marker_init`` ('random' or 'cls'), ``dcsr_sentence_pooling`` ('marker',
    the paper; 'mean'; 'independent'), ``dcsr_train_unit`` ('sentence', the paper; 'passage'),
    ``dcsr_passage_view`` (also index the pooled whole passage, after the sentences).
    """

    default_loss = "contrastive"
    options_class = DcsrOptions
    formatter_class = SentenceFormatter
    pools_tokens = True  # queries are pooled like DPR's

    @property
    def options(self) -> DcsrOptions:
        return self.config.options

    @classmethod
    def validate_config(cls, config: EncoderConfig) -> None:
        super().validate_config(config)
        opts: DcsrOptions = config.options
        negatives = {"dcsr_in_passage_negatives": opts.in_passage_negatives, "dcsr_bm25_negatives": opts.bm25_negatives}
        pooling = opts.sentence_pooling
        if pooling not in SENTENCE_POOLINGS:
            raise ConfigError(f"--dcsr_sentence_pooling must be one of {', '.join(SENTENCE_POOLINGS)}, "
                              f"got {pooling!r}")
        if opts.passage_view and pooling == "independent":
            raise ConfigError("--dcsr_passage_view needs a whole-passage encoding: not with --dcsr_sentence_pooling "
                              "independent")
        unit = opts.train_unit
        if unit not in TRAIN_UNITS:
            raise ConfigError(f"--dcsr_train_unit must be one of {', '.join(TRAIN_UNITS)}, got {unit!r}")
        if unit == "passage":
            changed = [f"--{key} {value}" for key, value in negatives.items() if value != 1]
            if changed:
                raise ConfigError(f"{' and '.join(changed)}: sentence negatives do not apply to --dcsr_train_unit "
                                  "passage (its hard negatives are passages: --train_group_size)")

    @classmethod
    def formatter_options(cls, config: EncoderConfig) -> dict[str, Any]:
        return {"sentence_pooling": config.options.sentence_pooling}

    @classmethod
    def prepare_backbone(cls, config: EncoderConfig, tokenizer: PreTrainedTokenizerBase,
                         query_encoder: PreTrainedModel, passage_encoder: PreTrainedModel) -> None:
        if config.options.sentence_pooling == "marker":
            add_marker_tokens(tokenizer, [query_encoder, passage_encoder], [SENT_MARKER],
                              init=config.options.marker_init)

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        batch = dict(batch)
        mask = batch.pop("sentence_mask").bool()
        if "sentence_rows" in batch:  # independent: one sentence per row, mean-pooled like a query
            rows = batch.pop("sentence_rows")
            flat = self._mean(self._last_hidden(self.p_encoder, batch), batch["attention_mask"])
            return self._finish(flat[rows]), mask
        if "sentence_starts" in batch:  # mean of each sentence's token span, via prefix sums
            starts, ends = batch.pop("sentence_starts"), batch.pop("sentence_ends")
            hidden = self._last_hidden(self.p_encoder, batch)
            reps = span_means(hidden, starts, ends)
            return self._with_passage_view(reps, mask, hidden, batch["attention_mask"])
        positions = batch.pop("sentence_positions")
        hidden = self._last_hidden(self.p_encoder, batch)
        reps = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        return self._with_passage_view(reps, mask, hidden, batch["attention_mask"])

    @property
    def has_passage_view(self) -> bool:
        return bool(self.options.passage_view)

    def _with_passage_view(self, reps: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor,
                           attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentence views, then (``dcsr_passage_view``) the pooled passage in the slot after each passage's last
        sentence, so sentence j stays view j (training selections, mined sentences and spans keep their index)."""
        if not self.has_passage_view:
            return self._finish(reps), mask
        rows = torch.arange(reps.shape[0], device=reps.device)
        slot = mask.sum(1)
        reps = torch.cat([reps, reps.new_zeros(reps.shape[0], 1, reps.shape[-1])], 1)
        reps = reps.index_put((rows, slot), self._pool(hidden, attention_mask).to(reps.dtype))
        mask = torch.cat([mask, mask.new_zeros(mask.shape[0], 1)], 1).index_put((rows, slot), mask.new_ones(()))
        return self._finish(reps), mask

    @staticmethod
    def _mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)

    def forward(self, query: dict[str, torch.Tensor] | None = None, passage: dict[str, torch.Tensor] | None = None,
                sentence_selection: torch.Tensor | None = None,
                passage_keys: torch.Tensor | None = None) -> EncoderOutput:
        """With ``sentence_selection`` (B, C, 2) of (passage row, sentence) pairs — each query's positive
        sentence first, then its negatives — the loss runs over the selected sentence vectors: every query
        scores all B·C selected sentences of the batch (its own negatives and the in-batch ones).
        ``passage_keys`` (B·C,) are then the selected sentences' content keys."""
        if sentence_selection is None or not self.training or query is None or passage is None:
            return super().forward(query, passage, passage_keys)
        q_reps = self.encode_query(query)
        p_reps, p_mask = self.encode_passage(passage)
        return self.loss_from_reps(q_reps, p_reps, p_mask, passage_keys, sentence_selection=sentence_selection)

    def loss_from_reps(self, q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor,
                       passage_keys: torch.Tensor | None = None,
                       sentence_selection: torch.Tensor | None = None) -> EncoderOutput:
        if sentence_selection is None:
            return super().loss_from_reps(q_reps, p_reps, p_mask, passage_keys)
        rows, sents = sentence_selection[..., 0].reshape(-1), sentence_selection[..., 1].reshape(-1)
        candidates = p_reps[rows, sents].unsqueeze(1)  # (B·C, 1, D)
        return self.contrastive_step(q_reps, candidates, torch.ones(candidates.shape[:2], dtype=torch.bool,
                                                                      device=candidates.device), passage_keys)

    def train_data(self, records: Any, group_size: int, seed: int = 42, positive_no_shuffle: bool = False,
                   negative_no_shuffle: bool = False, num_proc: int = 1) -> tuple[Any, Any]:
        from multiview_plugin.data.sentence_dataset import SentenceTrainCollator, SentenceTrainDataset

        opts = self.options
        if opts.train_unit == "passage":  # passage groups, scored by their best sentence
            return super().train_data(records, group_size, seed=seed, positive_no_shuffle=positive_no_shuffle,
                                      negative_no_shuffle=negative_no_shuffle, num_proc=num_proc)
        dataset = SentenceTrainDataset(records, self.formatter, in_passage_negatives=opts.in_passage_negatives,
                                       bm25_negatives=opts.bm25_negatives, seed=seed, num_proc=num_proc)
        return dataset, SentenceTrainCollator(self.formatter, passage_keys=self.config.mask_duplicate_positives)

    def prepares_data_in_processes(self) -> bool:
        return self.options.train_unit == "sentence"  # the sentence records (split, tokenised, selected)

    def describe_views(self) -> dict[str, Any]:
        return {"kind": "sentence", "rows": True, **({"passage_view": True} if self.has_passage_view else {})}

    def view_rows(self, formatter: SentenceFormatter, texts: list[str], mask: np.ndarray) -> np.ndarray:
        """Each kept sentence's character span [start, end) in its passage text, and 1 if it was cut short; with
        ``dcsr_passage_view`` the passage view's row, (0, len(text), 0), follows its sentences."""
        sentence_lists = [formatter.split(t) for t in texts]
        plans = formatter.plan(sentence_lists)
        last = [s[len(p) - 1] for s, p in zip(sentence_lists, plans) if p]
        full = formatter.tokenizer(last, add_special_tokens=False)["input_ids"] if last else []
        rows, n = [], 0
        offset = len(formatter.passage_prefix)
        extra = int(self.has_passage_view)
        for text, sentences, plan, count in zip(texts, sentence_lists, plans, mask.sum(axis=1).tolist()):
            if len(plan) != count - extra:
                raise ValueError(f"{count - extra} sentence vectors but {len(plan)} kept sentences")
            spans = sentence_spans(formatter.passage_prefix + text, sentences[:len(plan)])
            for j, (start, end) in enumerate(spans):
                cut = j == len(plan) - 1 and len(plan[j]) < max(1, len(full[n]))
                rows.append((max(start - offset, 0), max(end - offset, 0), int(cut)))
            if extra:
                rows.append((0, len(text), 0))
            n += bool(plan)
        return np.asarray(rows, dtype=np.int32).reshape(-1, 3)
