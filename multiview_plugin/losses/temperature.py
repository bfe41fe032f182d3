"""Temperature schedules for the contrastive losses."""

from __future__ import annotations

import math

from multiview_plugin.text_options import DEFAULT_ALPHA, MIN_TEMPERATURE, TEMPERATURE


def temperature_at(
    epoch: int, schedule: str = "fixed", initial: float = TEMPERATURE, alpha: float = DEFAULT_ALPHA,
    minimum: float = MIN_TEMPERATURE,
) -> float:
    """Temperature for ``epoch`` (counted from 0).

    ``annealed`` is MVR's eq. 8, ``tau = max(0.3, exp(-alpha * t))``, generalised to a starting value
    ``initial`` and floor ``minimum``: ``tau = max(minimum, initial * exp(-alpha * t))``; with the defaults
    it is exactly the paper's schedule. ``fixed`` returns ``initial``.

    Examples
    --------
    >>> [round(temperature_at(t, "annealed"), 3) for t in (0, 5, 20)]
    [1.0, 0.607, 0.3]
    """
    if schedule == "fixed":
        return initial
    if schedule == "annealed":
        return max(minimum, initial * math.exp(-alpha * epoch))
    raise ValueError(f"unknown temperature schedule {schedule!r}; expected 'fixed' or 'annealed'")
