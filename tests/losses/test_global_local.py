"""Tests of multiview_plugin/losses/global_local.py: MVR's global-local loss and the view-balance term."""

from __future__ import annotations

import pytest
import torch

from multiview_plugin.losses.global_local import view_balance_loss


def test_view_balance_loss_is_one_when_balanced_and_grows_as_one_view_takes_every_query():
    k = 4
    confident = 8.0 * torch.eye(k).repeat(2, 1)  # 8 queries, each view the clear winner of two
    assert view_balance_loss(confident).item() == pytest.approx(1.0, abs=1e-6)
    assert view_balance_loss(torch.zeros(8, k)).item() == pytest.approx(1.0, abs=1e-6)  # views alike: P uniform
    values = []
    for margin in (1.0, 4.0, 20.0):  # every query routed to view 0, ever more confidently
        collapsed = torch.zeros(8, k)
        collapsed[:, 0] = margin
        values.append(view_balance_loss(collapsed).item())
    assert 1.0 < values[0] < values[1] < values[2] and values[2] == pytest.approx(k, abs=1e-4)
    # padded views (-inf) take no probability; K counts them (MVR's views are never padded)
    padded = torch.tensor([[5.0, -5.0, float("-inf")], [-5.0, 5.0, float("-inf")]])
    assert view_balance_loss(padded).item() == pytest.approx(3 * (0.5 * 0.5 + 0.5 * 0.5), abs=1e-6)


def test_view_balance_loss_gradient_lowers_the_overused_view():
    logits = torch.tensor([[2.0, 0.0, 0.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.0]], requires_grad=True)
    view_balance_loss(logits).backward()
    # view 0 wins 2 of 3 queries: descent lowers its logit and raises the idle view 2's
    assert (logits.grad[:, 0] > 0).all() and (logits.grad[:, 2] < 0).all()


def test_the_owning_encoder_hands_the_loss_its_options():
    """The loss reads MVR's flags by name from whatever options its encoder hands it (typed or saved dict), keeps
    its defaults with another method's, and its defaults are MVR's (the loss imports no method: issue 39)."""
    from multiview_plugin.losses.global_local import GlobalLocalLoss
    from multiview_plugin.modeling.dpr import DprEncoder
    from multiview_plugin.modeling.mvr import MvrOptions

    typed = GlobalLocalLoss.from_options(MvrOptions(lam=0.3, balance_weight=0.1))
    assert (typed.lam, typed.balance_weight) == (0.3, 0.1)
    assert GlobalLocalLoss.from_options({"mvr_lambda": 0.5}).lam == 0.5
    other = GlobalLocalLoss.from_options(DprEncoder.options_class())
    defaults = MvrOptions()
    assert (other.lam, other.balance_weight) == (defaults.lam, defaults.balance_weight)
    assert set(GlobalLocalLoss.option_flags.values()) <= set(MvrOptions.flags())
