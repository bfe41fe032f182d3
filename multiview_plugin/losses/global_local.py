"""MVR's global-local loss (Zhang et al., 2022, "Multi-View Document Representation Learning for
Open-Domain Dense Retrieval", eqs. 5-7)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.registry import register_loss


def view_balance_loss(view_logits: torch.Tensor) -> torch.Tensor:
    """The Switch Transformer's load-balancing loss (Fedus et al. 2021, eq. 4) on MVR's view assignment.

    ``view_logits`` is (Q, K): each query's scores against its positive passage's K views, already divided by
    the temperature (``-inf`` on padded views). Each query is "routed" to its views by ``p = softmax(logits)``,
    the distribution that the Local Variation diagnostic reads; then

        loss = K * sum_i f_i * P_i,   f_i = fraction of queries whose best (arg-max) view is i,
                                       P_i = mean over queries of p_i.

    f carries no gradient (an arg-max); the gradient flows through P, lowering the probability of the views
    that win most often. The loss is 1 when the queries are spread evenly over the views (f_i = P_i = 1/K) and
    approaches K when one view takes every query with certainty. K counts padded views too (MVR's never are).

    Examples
    --------
    >>> round(view_balance_loss(torch.tensor([[5.0, 0.0], [0.0, 5.0]])).item(), 4)  # one query per view
    1.0
    >>> round(view_balance_loss(torch.tensor([[5.0, 0.0], [5.0, 0.0]])).item(), 4)  # view 0 takes both
    1.9866
    """
    k = view_logits.shape[-1]
    probs = torch.softmax(view_logits.float(), dim=-1)  # -inf padding → probability 0
    fraction = F.one_hot(view_logits.argmax(dim=-1), k).to(probs.dtype).mean(dim=0)
    return k * (fraction * probs.mean(dim=0)).sum()


@register_loss("mvr_global_local")
class GlobalLocalLoss(MultiViewLoss):
    """``L = L_global + lambda * L_local``.

    * ``L_global`` (eq. 6) is the contrastive loss on ``f(q,d) = max_i f_i(q,d)`` over the batch.
    * ``L_local`` (eq. 7) is a softmax over the positive document's own views:
      ``-log e^{f(q,d+)/tau} / sum_i e^{f_i(q,d+)/tau}``, pushing the matched viewer away from the others.

    Both terms use the same (annealed) temperature, as in the paper. Padded views are excluded.

    With ``balance_weight`` > 0 (not in the paper), ``+ balance_weight * L_balance`` with ``L_balance`` the
    load-balancing term of :func:`view_balance_loss` on the same positive-view softmax as ``L_local``; it is
    logged as ``loss_balance``. At 0 the loss and its parts are exactly the paper's.

    Parameters
    ----------
    lam : weight of the local term (paper: 0.01).
    balance_weight : weight of the load-balancing term (``--mvr_balance_weight``, default 0: off).

    Examples
    --------
    >>> scores = torch.tensor([[[2.0, 0.0], [1.0, 0.0]]])  # 1 query, 2 passages, 2 views
    >>> out = GlobalLocalLoss(lam=0.5)(scores, torch.tensor([0]), 1.0)
    >>> [round(out.parts[k].item(), 4) for k in ("loss_global", "loss_local")]
    [0.3133, 0.1269]
    """

    # lambda and the balance weight are MVR's flags (its options, modeling/mvr.py, declare them with these
    # defaults); with another method's options the defaults hold
    option_flags: ClassVar[dict[str, str]] = {"lam": "mvr_lambda", "balance_weight": "mvr_balance_weight"}

    def __init__(self, lam: float = 0.01, balance_weight: float = 0.0):
        super().__init__()
        self.lam = lam
        self.balance_weight = balance_weight

    def forward(self, scores: torch.Tensor, target: torch.Tensor, temperature: float) -> LossOutput:
        scaled = scores / temperature
        doc_scores = scaled.max(dim=-1).values
        loss_global = F.cross_entropy(doc_scores, target)
        positive_views = scaled[torch.arange(len(target), device=target.device), target]  # (Q, K)
        loss_local = (torch.logsumexp(positive_views, dim=-1) - positive_views.max(dim=-1).values).mean()
        loss = loss_global + self.lam * loss_local
        parts = {"loss_global": loss_global.detach(), "loss_local": loss_local.detach()}
        if self.balance_weight:
            loss_balance = view_balance_loss(positive_views)
            loss = loss + self.balance_weight * loss_balance.to(loss.dtype)
            parts["loss_balance"] = loss_balance.detach()
        return LossOutput(loss, parts)
