"""The contrastive loss (losses/contrastive.py) against hand-computed values, and the loss registry; the shared
hand-computed example (Q, P, MASK) other loss and scoring tests use."""

import math

import pytest
import torch

from multiview_plugin.losses import ContrastiveLoss, GlobalLocalLoss
from multiview_plugin.registry import get_loss_class
from multiview_plugin.scoring import view_scores


def lse(*xs):
    return math.log(sum(math.exp(x) for x in xs))


# 2 queries, 3 passages with 2 views each (passage 2 has only one real view).
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
P = torch.tensor([
    [[1.0, 0.0], [0.5, 0.5]],
    [[0.0, 2.0], [1.0, 1.0]],
    [[0.2, 0.1], [9.0, 9.0]],
])
MASK = torch.tensor([[True, True], [True, True], [True, False]])


def test_contrastive_loss_hand_computed():
    tau = 0.5
    target = torch.tensor([0, 1])
    out = ContrastiveLoss()(view_scores(Q, P, MASK), target, tau)
    # f = max over views: q0 -> [1, 1, 0.2], q1 -> [0.5, 2, 0.1]
    l0 = lse(1 / tau, 1 / tau, 0.2 / tau) - 1 / tau
    l1 = lse(0.5 / tau, 2 / tau, 0.1 / tau) - 2 / tau
    assert out.loss.item() == pytest.approx((l0 + l1) / 2, abs=1e-6)


def test_loss_registry():
    assert get_loss_class("contrastive") is ContrastiveLoss
    assert get_loss_class("mvr_global_local") is GlobalLocalLoss
    assert GlobalLocalLoss.from_options({"mvr_lambda": 0.5}).lam == 0.5


