"""Bounds on the sizes and numbers a model is built from, checked before anything is allocated.

A size read from a saved config (``multiview_config.json``: ``mvr_num_views`` = 10**9) or given as a flag
(``--mvr_num_views 1000000000``) would otherwise build a billion viewer tokens before anything complains. Fields
that take such a value carry their allowed range in their dataclass metadata (:func:`bounded`), and the
dataclass checks them when it is built (:func:`check_fields`): the method options
(:mod:`multiview_plugin.modeling.options`), :class:`~multiview_plugin.modeling.config.EncoderConfig` and the
drivers' argument dataclasses. The flags and the saved file share the ranges, so a value is refused the same
way wherever it comes from: as a flag, ``--mvr_num_views must be >= 1 and <= 1024, got 1000000000``; from a
file, the same with the file and the field in front (:meth:`OutOfBoundsError.located`).

A bottom-floor module (imports nothing of the package but its errors).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from multiview_plugin.errors import ConfigError

# Views or vectors per document (mvr_num_views, mebert_num_vectors), and negatives per query (dcsr): each is a
# row of every passage's sequence or of every query's candidates.
MAX_PER_ITEM = 1024
# Query and passage lengths in tokens: beyond every backbone's context (2**20).
MAX_SEQUENCE_LENGTH = 1 << 20
# --pad_to_multiple_of: every batch is padded up to a multiple of it (Tevatron: 16).
MAX_PAD_MULTIPLE = 1024
# --lora_r: the adapters' rank (each adapted layer allocates r x (its in + out) weights).
MAX_LORA_RANK = 8192

Bounds = tuple[float | int | None, float | int | None]
LENGTH_BOUNDS: Bounds = (1, MAX_SEQUENCE_LENGTH)  # --query_max_len, --passage_max_len
PAD_BOUNDS: Bounds = (0, MAX_PAD_MULTIPLE)  # --pad_to_multiple_of (0: none)


def bounded(low: float | int | None, high: float | int | None = None) -> dict[str, Bounds]:
    """Dataclass field metadata for a value in ``[low, high]`` (None: unbounded on that side). Integer bounds
    make an integer field; float bounds a (finite) number."""
    return {"bounds": (low, high)}


def describe(bounds: Bounds) -> str:
    """``>= 1 and <= 1024``, ``>= 0``."""
    low, high = bounds
    parts = [f">= {low}" if low is not None else "", f"<= {high}" if high is not None else ""]
    return " and ".join(p for p in parts if p)


class OutOfBoundsError(ConfigError):
    """A value outside its field's range, or not a number of the field's kind. ``str()`` names it as a flag;
    :meth:`located` as a field of a file."""

    def __init__(self, name: str, value: Any, bounds: Bounds, integer: bool):
        self.name, self.value, self.bounds, self.integer = name, value, bounds, integer
        self.section = ""  # the object holding the field in a file (e.g. "options"), set where that is known
        super().__init__(f"--{name} {self.problem()}")

    def problem(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        wrong_kind = not _is_number(self.value, self.integer)
        return (f"must be {kind} {describe(self.bounds)}" if wrong_kind else f"must be {describe(self.bounds)}") + \
            f", got {self.value!r}"

    def located(self, path: str | os.PathLike) -> ConfigError:
        """The same error as a field of the file ``path`` (inside :attr:`section` when set)."""
        field = f"{self.section}.{self.name}" if self.section else self.name
        return ConfigError(f"{path}: field '{field}' {self.problem()}")


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int)
    return isinstance(value, (int, float)) and math.isfinite(value)


def check_value(name: str, value: Any, bounds: Bounds, allow_none: bool = False) -> None:
    """Raise :class:`OutOfBoundsError` unless ``value`` is a number of the bounds' kind within them."""
    if value is None and allow_none:
        return
    low, high = bounds
    integer = all(isinstance(b, int) for b in bounds if b is not None)
    if (not _is_number(value, integer) or (low is not None and value < low)
            or (high is not None and value > high)):
        raise OutOfBoundsError(name, value, bounds, integer)


def check_fields(obj: Any, name_of: Callable[[dataclasses.Field], str] | None = None,
                 bounds: Mapping[str, Bounds] | None = None) -> None:
    """Check every field of the dataclass instance ``obj`` that declares bounds (:func:`bounded`), or those
    named in ``bounds`` (for dataclasses whose metadata goes elsewhere: ``HfArgumentParser`` hands a field's
    metadata to argparse); a field whose default is None may be None. ``name_of``: the name errors give a field
    (default: its own)."""
    for f in dataclasses.fields(obj):
        allowed = bounds.get(f.name) if bounds is not None else f.metadata.get("bounds")
        if allowed is not None:
            check_value(name_of(f) if name_of else f.name, getattr(obj, f.name), allowed,
                        allow_none=f.default is None)
