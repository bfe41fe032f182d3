"""MVR (Zhang et al., 2022, "Multi-View Document Representation Learning for Open-Domain Dense Retrieval").

k new viewer tokens replace [CLS] in documents, ``[VIE1] ... [VIEk] d [SEP]``, and one query viewer replaces
it in queries, ``[VIE] q [SEP]``. Every viewer sits at position id 0 and the document tokens keep positions
1..n, "to avoid effect on the positional encoding of the original input" (paper §3.2); with
``mvr_viewer_positions='distinct'`` they take positions 0..k-1 instead (see the option's help). The last-layer
states of the k viewers are the document's views; the score is the max over views (eq. 4), trained with
the global-local loss under an annealed temperature (eqs. 5-8).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.modeling.formatting import InputFormatter
from multiview_plugin.modeling.tokens import add_marker_tokens, token_ids
from multiview_plugin.registry import register_encoder

QUERY_VIEWER = "[VIE]"


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
                 **kwargs: Any):
        super().__init__(tokenizer, **kwargs)
        self.num_views = num_views
        self.viewer_positions = viewer_positions
        ids = token_ids(tokenizer, [QUERY_VIEWER, *viewer_tokens(num_views)], "mvr")
        self.query_viewer_id, self.viewer_ids = ids[0], ids[1:]

    def queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        end = self.end_token_id()
        body = self.tokenize_plain([self.query_prefix + t for t in texts], self.query_max_len - 2)
        seqs = [[self.query_viewer_id, *ids, end] for ids in body]
        return self.assemble(seqs, [list(range(len(s))) for s in seqs])

    def passages(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        end = self.end_token_id()
        body = self.tokenize_plain([self.passage_prefix + t for t in texts], self.passage_max_len - 2)
        k = self.num_views
        seqs = [[*self.viewer_ids, *ids, end] for ids in body]
        if self.viewer_positions == "distinct":
            positions = [list(range(k + len(ids) + 1)) for ids in body]
        else:
            positions = [[0] * k + list(range(1, len(ids) + 2)) for ids in body]
        return self.assemble(seqs, positions)


@register_encoder("mvr")
class MultiViewerEncoder(MultiViewEncoder):
    """MVR: k viewer-token vectors per document, one viewer vector per query, max-over-views score.

    Options: ``mvr_num_views`` (k, default 8), ``mvr_lambda`` (local-loss weight, 0.01), ``mvr_alpha`` and
    ``mvr_min_temperature`` (annealing, 0.1 and 0.3), ``mvr_viewer_init`` ('random' as in the paper, or
    'cls': copies of the [CLS] embedding plus small noise, so views are not identical).
    """

    default_loss = "mvr_global_local"
    default_temperature_schedule = "annealed"
    option_prefix = "mvr_"
    formatter_class = ViewerFormatter

    @classmethod
    def formatter_options(cls, config: EncoderConfig) -> dict[str, Any]:
        return {"num_views": config.options["mvr_num_views"],
                "viewer_positions": config.options.get("mvr_viewer_positions", "shared")}

    @classmethod
    def validate_config(cls, config: EncoderConfig) -> None:
        super().validate_config(config)
        k = config.options.get("mvr_num_views", 0)
        if k < 1:
            raise ConfigError(f"--mvr_num_views must be >= 1, got {k}")
        if config.options.get("mvr_viewer_init", "random") not in ("random", "cls"):
            raise ConfigError(f"--mvr_viewer_init must be 'random' or 'cls', got {config.options['mvr_viewer_init']!r}")
        if config.options.get("mvr_viewer_positions", "shared") not in ("shared", "distinct"):
            raise ConfigError(f"--mvr_viewer_positions must be 'shared' or 'distinct', "
                              f"got {config.options['mvr_viewer_positions']!r}")
        if config.passage_max_len < 3 or config.query_max_len < 3:
            raise ConfigError("mvr needs --query_max_len and --passage_max_len of at least 3")

    @classmethod
    def prepare_backbone(
        cls,
        config: EncoderConfig,
        tokenizer: PreTrainedTokenizerBase,
        query_encoder: PreTrainedModel,
        passage_encoder: PreTrainedModel,
    ) -> None:
        tokens = [QUERY_VIEWER, *viewer_tokens(config.options["mvr_num_views"])]
        # "Randomly initialised" (paper §3.2), at the scale of the backbone's own word embeddings
        add_marker_tokens(tokenizer, [query_encoder, passage_encoder], tokens,
                          init=config.options.get("mvr_viewer_init", "random"))

    def __init__(self, config: EncoderConfig, *args: Any, **kwargs: Any):
        super().__init__(config, *args, **kwargs)
        k = config.options["mvr_num_views"]
        limit = getattr(self.p_encoder.config, "max_position_embeddings", None)
        if config.options.get("mvr_viewer_positions") == "distinct" and limit is not None:
            needed = config.passage_max_len - 1 + k  # positions 0..k-1 for viewers, then text and [SEP]
            if needed > limit:
                raise ConfigError(f"--mvr_viewer_positions distinct needs {needed} positions "
                                  f"(--passage_max_len - 1 + k) but the backbone has {limit}")

    def encode_query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._finish(self._last_hidden(self.query_encoder, batch)[:, 0])

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.config.options["mvr_num_views"]
        reps = self._finish(self._last_hidden(self.p_encoder, batch)[:, :k])
        return reps, torch.ones(reps.shape[:2], dtype=torch.bool, device=reps.device)
