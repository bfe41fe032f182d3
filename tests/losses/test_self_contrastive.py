"""Tests of multiview_plugin/losses/self_contrastive.py: MLR's self-contrastive pooling loss (eqs. 5-7)."""

from __future__ import annotations

import math

import pytest
import torch

from multiview_plugin.losses.self_contrastive import SelfContrastiveLoss


def test_loss_parts_against_hand_computed_values():
    # 1 query; passages 0 (positive) and 1, each with (last, other) layer scores
    scores = torch.tensor([[[1.0, 3.0], [0.0, 2.0]]])
    out = SelfContrastiveLoss(lam=0.5, reg_temperature=2.0)(scores, torch.tensor([0]), 1.0)
    # L_ce: the positive by its last layer (1), the negative by its max over layers (2)
    assert out.parts["loss_ce"].item() == pytest.approx(math.log(1 + math.e))
    # L_reg at tau_r 2: -log e^{1/2} / (e^{1/2} + e^{3/2})
    reg = math.log(math.exp(0.5) + math.exp(1.5)) - 0.5
    assert out.parts["loss_reg"].item() == pytest.approx(reg, rel=1e-5)
    assert out.loss.item() == pytest.approx(math.log(1 + math.e) + 0.5 * reg, rel=1e-5)


def test_the_regulariser_is_zero_weight_with_lambda_zero_and_uses_tau_by_default():
    scores = torch.randn(3, 4, 2)
    target = torch.tensor([0, 2, 1])
    plain = SelfContrastiveLoss(lam=0.0)(scores, target, 0.5)
    torch.testing.assert_close(plain.loss, plain.parts["loss_ce"])
    same_tau = SelfContrastiveLoss(lam=1.0, reg_temperature=0.5)(scores, target, 0.5)
    torch.testing.assert_close(SelfContrastiveLoss(lam=1.0)(scores, target, 0.5).loss, same_tau.loss)


def test_from_options_reads_mlrs_options():
    from multiview_plugin.registry import get_encoder_class

    options = get_encoder_class("mlr").options_class(lam=0.01, reg_temperature=0.2)
    loss = SelfContrastiveLoss.from_options(options)
    assert (loss.lam, loss.reg_temperature) == (0.01, 0.2)


def test_defaults_are_mlrs_and_another_methods_options_keep_them():
    from multiview_plugin.modeling.mlr import MlrOptions
    from multiview_plugin.modeling.mvr import MvrOptions

    loss, defaults = SelfContrastiveLoss.from_options(MvrOptions(lam=0.7)), MlrOptions()
    assert (loss.lam, loss.reg_temperature) == (defaults.lam, defaults.reg_temperature)
    assert set(SelfContrastiveLoss.option_flags.values()) <= set(MlrOptions.flags())
