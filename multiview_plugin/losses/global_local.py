"""MVR's global-local loss (Zhang et al., 2022, "Multi-View Document Representation Learning for
Open-Domain Dense Retrieval", eqs. 5-7)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.registry import register_loss


@register_loss("mvr_global_local")
class GlobalLocalLoss(MultiViewLoss):
    """``L = L_global + lambda * L_local``.

    * ``L_global`` (eq. 6) is the contrastive loss on ``f(q,d) = max_i f_i(q,d)`` over the batch.
    * ``L_local`` (eq. 7) is a softmax over the positive document's own views:
      ``-log e^{f(q,d+)/tau} / sum_i e^{f_i(q,d+)/tau}``, pushing the matched viewer away from the others.

    Both terms use the same (annealed) temperature, as in the paper. Padded views are excluded.

    Parameters
    ----------
    lam : weight of the local term (paper: 0.01).

    Examples
    --------
    >>> scores = torch.tensor([[[2.0, 0.0], [1.0, 0.0]]])  # 1 query, 2 passages, 2 views
    >>> out = GlobalLocalLoss(lam=0.5)(scores, torch.tensor([0]), 1.0)
    >>> [round(out.parts[k].item(), 4) for k in ("loss_global", "loss_local")]
    [0.3133, 0.1269]
    """

    def __init__(self, lam: float = 0.01):
        super().__init__()
        self.lam = lam

    @classmethod
    def from_options(cls, options: Any) -> GlobalLocalLoss:
        """lambda from MVR's options (``--mvr_lambda``; their default with another method's)."""
        from multiview_plugin.modeling.mvr import MvrOptions  # the flags live with the method

        return cls(lam=MvrOptions.coerce(options).lam)

    def forward(self, scores: torch.Tensor, target: torch.Tensor, temperature: float) -> LossOutput:
        scaled = scores / temperature
        doc_scores = scaled.max(dim=-1).values
        loss_global = F.cross_entropy(doc_scores, target)
        positive_views = scaled[torch.arange(len(target), device=target.device), target]  # (Q, K)
        loss_local = (torch.logsumexp(positive_views, dim=-1) - positive_views.max(dim=-1).values).mean()
        loss = loss_global + self.lam * loss_local
        return LossOutput(loss, {"loss_global": loss_global.detach(), "loss_local": loss_local.detach()})
