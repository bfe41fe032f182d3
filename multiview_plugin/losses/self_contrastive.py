"""MLR's self-contrastive pooling loss (multi-layer representations; papers/mlr_*, eqs. 5-7)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.registry import register_loss


@register_loss("mlr_self_contrastive")
class SelfContrastiveLoss(MultiViewLoss):
    """``L = L_ce + lambda * L_reg`` for a single-vector model trained with several layer vectors.

    Views are layers with the **last layer first**. The single vector used at inference is the last layer's,
    so training scores the positive with it, ``f_last(q, d+)``, while each negative gets its max over layers
    (minimising the max also minimises the last layer's score), eq. 5:
    ``L_ce = -log e^{f_last(q,d+)/tau} / (e^{f_last(q,d+)/tau} + sum_{d-} e^{max_l f_l(q,d-)/tau})``.
    The regulariser (eq. 6) pushes the last layer to be the positive's best:
    ``L_reg = -log e^{f_last(q,d+)/tau_r} / sum_l e^{f_l(q,d+)/tau_r}``.

    Parameters
    ----------
    lam : weight lambda of L_reg (paper: 1.0 for NQ / TriviaQA / SQuAD, 0.01 for MS MARCO).
    reg_temperature : tau_r; None uses the contrastive temperature.

    Examples
    --------
    >>> scores = torch.tensor([[[1.0, 3.0], [0.0, 2.0]]])  # 1 query; 2 passages x (last, other) layer
    >>> out = SelfContrastiveLoss(lam=1.0)(scores, torch.tensor([0]), 1.0)
    >>> [round(out.parts[k].item(), 4) for k in ("loss_ce", "loss_reg")]  # logits [1, max(0,2)=2]
    [1.3133, 2.1269]
    """

    # lambda and tau_r are MLR's flags (its options, modeling/mlr.py, declare them with these defaults); with
    # another method's options the defaults hold
    option_flags: ClassVar[dict[str, str]] = {"lam": "mlr_lambda", "reg_temperature": "mlr_reg_temperature"}

    def __init__(self, lam: float = 1.0, reg_temperature: float | None = None):
        super().__init__()
        self.lam = lam
        self.reg_temperature = reg_temperature

    def forward(self, scores: torch.Tensor, target: torch.Tensor, temperature: float) -> LossOutput:
        rows = torch.arange(len(target), device=target.device)
        logits = scores.max(dim=-1).values.clone()
        logits[rows, target] = scores[rows, target, 0]
        loss_ce = F.cross_entropy(logits / temperature, target)
        positive_layers = scores[rows, target] / (self.reg_temperature or temperature)  # (Q, L)
        loss_reg = (torch.logsumexp(positive_layers, dim=-1) - positive_layers[:, 0]).mean()
        loss = loss_ce + self.lam * loss_reg
        return LossOutput(loss, {"loss_ce": loss_ce.detach(), "loss_reg": loss_reg.detach()})
