"""The loss interface shared by every method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

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

    and are built by the encoder that owns them from its options (:meth:`from_options`): a loss names in
    :attr:`option_flags` the flags that set its hyperparameters, and reads them from whatever options the encoder
    hands it, by flag name. A loss knows no method class (losses never import modeling: docs/layout.md).
    """

    # constructor argument -> the flag that sets it (e.g. ``{"lam": "mvr_lambda"}``)
    option_flags: ClassVar[dict[str, str]] = {}

    def forward(self, scores: torch.Tensor, target: torch.Tensor, temperature: float) -> LossOutput:
        raise NotImplementedError

    @classmethod
    def from_options(cls, options: Any) -> MultiViewLoss:
        """The loss with the hyperparameters the owning encoder's options give (a method's typed options, or
        their saved dict: flag names as keys). A flag the options lack (another method's options: the loss used
        with a method that does not own its flags) keeps the loss's default."""
        get = getattr(options, "get", None)
        given = {arg: get(flag) for arg, flag in cls.option_flags.items()} if callable(get) else {}
        return cls(**{arg: value for arg, value in given.items() if value is not None})
