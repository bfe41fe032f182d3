"""In-batch contrastive loss (DPR; Karpukhin et al., 2020) over max-aggregated multi-vector scores."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.registry import register_loss


@register_loss("contrastive")
class ContrastiveLoss(MultiViewLoss):
    """``L_ce = -log e^{f(q,d+)/tau} / sum_{d in batch} e^{f(q,d)/tau}`` with ``f(q,d) = max_i f_i(q,d)``.

    The denominator runs over every passage of the (possibly cross-device) batch: the query's own hard
    negatives and all other queries' passages. With one view per document this is exactly DPR's loss.

    Examples
    --------
    >>> scores = torch.tensor([[[2.0], [0.0]]])  # one query, two single-view passages
    >>> round(ContrastiveLoss()(scores, torch.tensor([0]), 1.0).loss.item(), 4)
    0.1269
    """

    def forward(self, scores: torch.Tensor, target: torch.Tensor, temperature: float) -> LossOutput:
        doc_scores = scores.max(dim=-1).values
        loss = F.cross_entropy(doc_scores / temperature, target)
        return LossOutput(loss, {"loss_ce": loss.detach()})
