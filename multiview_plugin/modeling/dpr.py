"""DPR (Karpukhin et al., 2020): one vector per passage — the baseline every multi-view method is compared to."""

from __future__ import annotations

import torch

from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.registry import register_encoder


@register_encoder("dpr")
class DprEncoder(MultiViewEncoder):
    """Single-vector dual encoder: ``--pooling cls`` ([CLS] state) or ``mean`` (masked mean) of the last layer.

    Its passages are (B, 1, D), so the shared max-over-views scoring and loss reduce exactly to DPR's
    inner product and in-batch contrastive loss, and its shards keep Tevatron's single-vector layout.
    """

    default_loss = "contrastive"
    pools_tokens = True
    tevatron_tokenization = True

    def is_single_vector(self) -> bool:
        return True

    def encode_passage(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self._last_hidden(self.p_encoder, batch)
        reps = self._finish(self._pool(hidden, batch["attention_mask"])).unsqueeze(1)
        return reps, torch.ones(reps.shape[:2], dtype=torch.bool, device=reps.device)
