"""DCE, the dual cross encoder (query-informed document views from generated pseudo-queries).

Document view i is the cross-encoding of a pseudo-query and the document, ``E_d([CLS] q_i [SEP] d [SEP])``
(pooled like ``--pooling``, [CLS] by default); the query is a plain dual-encoder vector ``E_q([CLS] q [SEP])``;
f(q, d) = max_i ⟨q, d_i⟩. In training each (q, d⁺, d⁻) becomes (q, q+d⁺, q+d⁻): a query's candidates are
cross-encoded with that query, and the in-batch negatives are the other queries' (q'+d'). At encoding time the
views come from a pseudo-query file (variable: one view per query of the document).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from multiview_plugin.data.dataset import content_keys
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.modeling.formatting import InputFormatter, pad_sequences
from multiview_plugin.registry import register_encoder


class PairFormatter(InputFormatter):
    """Cross inputs ``[CLS] q [SEP] d [SEP]`` (T5: ``q </s> d </s>``): the query part holds at most
    ``query_max_len`` positions and the document part ``passage_max_len`` (the paper's 16 and 128), BERT
    segment ids 0 and 1."""

    def pairs(self, queries: Sequence[str], passages: Sequence[str]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        start = [tok.cls_token_id] if tok.cls_token_id is not None else []
        end = self.end_token_id()
        q_ids = self.tokenize_plain([self.query_prefix + q for q in queries], self.query_max_len - len(start) - 1)
        d_ids = self.tokenize_plain([self.passage_prefix + p for p in passages], self.passage_max_len - 1)
        sequences = [[*start, *q, end, *d, end] for q, d in zip(q_ids, d_ids)]
        batch = self.assemble(sequences)
        if self.uses_token_type_ids:
            split = [len(start) + len(q) + 1 for q in q_ids]
            types = [[0] * s + [1] * (len(seq) - s) for s, seq in zip(split, sequences)]
            batch["token_type_ids"] = pad_sequences(types, 0, self.pad_to_multiple_of)
        return batch

    def passages(self, texts: Sequence[str], views: Sequence[Sequence[str]] | None = None) -> dict[str, torch.Tensor]:
        """All views of each document flattened into one batch, plus ``view_counts`` (B,).

        ``views[i]`` are document i's pseudo-queries; a document without any is encoded once, alone
        (``[CLS] [SEP] d [SEP]``), so every document keeps one vector.
        """
        if views is None:
            raise ConfigError("dce encodes each document with its pseudo-queries: pass --pseudo_queries (a file "
                              "from python -m multiview_plugin.driver.generate_queries, or docTTTTTquery "
                              "predictions)")
        if len(views) != len(texts):
            raise ValueError(f"{len(texts)} documents but {len(views)} pseudo-query lists")
        per_doc = [list(v) or [""] for v in views]
        batch = self.pairs([q for v in per_doc for q in v], [t for t, v in zip(texts, per_doc) for _ in v])
        batch["view_counts"] = torch.tensor([len(v) for v in per_doc])
        return batch


@register_encoder("dce")
class DceEncoder(MultiViewEncoder):
    """DCE: one cross-encoded view per pseudo-query; max over views (see the module docstring)."""

    default_loss = "contrastive"
    formatter_class = PairFormatter
    pools_tokens = True

    @classmethod
    def validate_config(cls, config) -> None:
        super().validate_config(config)
        if config.query_max_len < 3 or config.passage_max_len < 2:
            raise ConfigError("dce needs --query_max_len >= 3 and --passage_max_len >= 2")

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        batch = dict(batch)
        counts = batch.pop("view_counts")
        hidden = self._last_hidden(self.p_encoder, batch)
        flat = self._finish(self._pool(hidden, batch["attention_mask"]))  # (sum of views, D)
        width = int(counts.max()) if len(counts) else 0
        mask = torch.arange(width, device=flat.device)[None, :] < counts.to(flat.device)[:, None]
        reps = flat.new_zeros(len(counts), width, flat.shape[-1])
        reps[mask] = flat  # row-major: document i's views in order
        return reps, mask

    def passage_inputs(self, formatter: Any, docids: Sequence[str], texts: Sequence[str],
                       views: dict[str, Sequence[str]] | None) -> dict[str, torch.Tensor]:
        if views is None:
            return formatter.passages(texts, None)  # raises the "pass --pseudo_queries" error
        missing = [d for d in docids if d not in views]
        if missing:
            raise ConfigError(f"the pseudo-query file has no entry for documents {missing[:5]}")
        return formatter.passages(texts, [views[d] for d in docids])

    def train_collator(self) -> QueryPairCollator:
        return QueryPairCollator(self.formatter, passage_keys=self.config.mask_duplicate_positives)

    def describe_views(self) -> dict[str, Any]:
        # view j is the document's j-th pseudo-query; the encode driver records where the queries are
        return {"kind": "pseudo_query"}


class QueryPairCollator:
    """(q, d⁺, d⁻...) → (q, q+d⁺, q+d⁻...): every passage of a group is cross-encoded with its own query
    (one view each), so the other groups' passages are the in-batch negatives (q'+d')."""

    def __init__(self, formatter: PairFormatter, passage_keys: bool = False):
        self.formatter = formatter
        self.passage_keys = passage_keys

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        texts = [p for f in features for p in f["passages"]]
        views = [[f["query"]] for f in features for _ in f["passages"]]
        batch = {"query": self.formatter.queries([f["query"] for f in features]),
                 "passage": self.formatter.passages(texts, views)}
        if self.passage_keys:  # a copy of query i's positive passage, cross-encoded with another query
            batch["passage_keys"] = content_keys(texts)
        return batch
