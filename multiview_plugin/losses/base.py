"""The loss interface shared by every method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class LossOutput:
    """A scalar loss plus its named parts (detached), which the trainer logs."""

    loss: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)


class MultiViewLoss(nn.Module):
    """Base class: a loss over per-view scores.

    Subclasses implement :meth:`forward` on

    * ``scores`` — (Q, P, K) per-view scores ``f_i(q, d)``, ``-inf`` on padded views;
    * ``target`` — (Q,) index into P of each query's positive;
    * ``temperature`` — the current tau.

    and are built from an encoder's typed options (:class:`~multiview_plugin.modeling.options.MethodOptions`)
    with :meth:`from_options`.
    """

    def forward(self, scores: torch.Tensor, target: torch.Tensor, temperature: float) -> LossOutput:
        raise NotImplementedError

    @classmethod
    def from_options(cls, options: Any) -> MultiViewLoss:
        return cls()
