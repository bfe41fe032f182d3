"""Tests of multiview_plugin/losses/base.py: the loss interface every method's loss implements."""

from __future__ import annotations

import pytest
import torch

from multiview_plugin.losses.base import LossOutput, MultiViewLoss
from multiview_plugin.registry import get_loss_class


def test_the_base_loss_must_be_implemented_and_builds_without_options():
    loss = MultiViewLoss.from_options(object())
    assert type(loss) is MultiViewLoss
    with pytest.raises(NotImplementedError):
        loss(torch.zeros(1, 1, 1), torch.zeros(1, dtype=torch.long), 1.0)
    out = LossOutput(torch.tensor(1.0))
    assert out.parts == {} and out.parts is not LossOutput(torch.tensor(1.0)).parts  # one dict per output


@pytest.mark.parametrize("name", ["contrastive", "mvr_global_local", "mlr_self_contrastive"])
def test_registered_losses_subclass_the_base(name):
    assert issubclass(get_loss_class(name), MultiViewLoss)
