"""Typed per-method options: each method declares its command-line flags as a dataclass next to its encoder.

A method's options class subclasses :class:`MethodOptions`, sets :attr:`MethodOptions.prefix` (the namespace of
its flags, e.g. ``"mvr_"``) and declares one field per flag with :func:`option` (default and ``--help`` text, in
one place)::

    @dataclass
    class MvrOptions(MethodOptions):
        prefix: ClassVar[str] = "mvr_"
        num_views: int = option(8, "MVR: number k of document viewer tokens ...", bounds=(1, MAX_PER_ITEM))

The encoder names it in ``options_class``; :func:`multiview_plugin.arguments.model_arguments` then adds the flags
of every registered method (built-in or from a ``multiview_plugin.encoders`` entry point) to the parsers, and
:class:`~multiview_plugin.modeling.config.EncoderConfig` holds an instance, saved in ``multiview_config.json``
under ``options`` with the flag names as keys (``{"mvr_num_views": 8, ...}``, the format it always had).

For code written against the earlier dict form, an instance also reads and writes like a mapping from flag
names (``options["mvr_num_views"]``); keys that are not flags of the method (``"lora"``: the LoRA settings of a
``--lora`` run) are kept in :attr:`MethodOptions.extra` and saved beside them.

A field declared with ``bounds=(low, high)`` is checked whenever options are built, from flags or from a saved
``multiview_config.json`` (:mod:`multiview_plugin.bounds`): sizes such as ``mvr_num_views`` are refused out of
range before anything is allocated, and the flag gets the same range.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from multiview_plugin.bounds import Bounds, bounded, check_fields

_MISSING = object()


def option(default: Any, help: str, flag: str | None = None, bounds: Bounds | None = None,
           choices: tuple[str, ...] | None = None) -> Any:
    """A method option: its default, its ``--help`` text, where the field name cannot be the flag's suffix
    (``lambda`` is a Python keyword) the full flag name, for a number its allowed range ``(low, high)``
    (None: open on that side; integer bounds make an integer option), checked when options are built, and for a
    string its allowed values (listed in ``--help`` and checked by the parser; the method checks saved configs)."""
    metadata = {"help": help, **({"flag": flag} if flag else {}), **(bounded(*bounds) if bounds else {}),
                **({"choices": tuple(choices)} if choices else {})}
    return field(default=default, metadata=metadata)


@dataclass(eq=False)
class MethodOptions:
    """Base class of the per-method options (a method without flags uses it as is).

    Equality is by the saved form, so options also compare equal to the dict they were read from; subclasses
    declared with ``@dataclass(eq=False)`` keep that (a plain ``@dataclass`` compares field by field)."""

    prefix: ClassVar[str] = ""
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        """Refuse a value outside its option's bounds (:class:`~multiview_plugin.bounds.OutOfBoundsError`, naming
        the flag), before a model is built from it."""
        check_fields(self, self.flag_of)

    # ------------------------------------------------------------ the flags
    @classmethod
    def option_fields(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.name != "extra"]

    @classmethod
    def flag_of(cls, f: dataclasses.Field) -> str:
        return f.metadata.get("flag") or cls.prefix + f.name

    @classmethod
    def flags(cls) -> dict[str, str]:
        """``{flag name: field name}``, e.g. ``{"mvr_num_views": "num_views"}``."""
        return {cls.flag_of(f): f.name for f in cls.option_fields()}

    @classmethod
    def argument_fields(cls) -> list[tuple[str, Any, dataclasses.Field]]:
        """``(flag name, type, field)`` triples for ``dataclasses.make_dataclass``: the command-line arguments."""
        hints = typing.get_type_hints(cls)
        return [(cls.flag_of(f), hints[f.name],
                 field(default=f.default, metadata={k: v for k, v in f.metadata.items() if k in ("help", "choices")}))
                for f in cls.option_fields()]

    # ------------------------------------------------------------ construction
    @classmethod
    def from_args(cls, args: Any) -> MethodOptions:
        """The options from parsed arguments (an object with one attribute per flag)."""
        return cls(**{name: getattr(args, flag) for flag, name in cls.flags().items() if hasattr(args, flag)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MethodOptions:
        """From the saved form (flag names as keys); missing flags take their defaults, other keys go to
        :attr:`extra`."""
        flags = cls.flags()
        known = {flags[k]: v for k, v in data.items() if k in flags}
        return cls(**known, extra={k: v for k, v in data.items() if k not in flags})

    @classmethod
    def coerce(cls, options: Any) -> MethodOptions:
        """``options`` as this class: itself, read from a dict (flag names as keys), or the defaults when it is
        another method's options (a loss used with a method that does not own its flags)."""
        if isinstance(options, cls):
            return options
        if isinstance(options, Mapping):
            return cls.from_dict(options)
        return cls()

    def to_dict(self) -> dict[str, Any]:
        """The saved form: flag names as keys, then :attr:`extra`."""
        out = {self.flag_of(f): getattr(self, f.name) for f in self.option_fields()}
        out.update(self.extra)
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MethodOptions):
            return type(self) is type(other) and self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # mutable

    # ------------------------------------------------------------ mapping view (flag names)
    def __getitem__(self, key: str) -> Any:
        name = self.flags().get(key)
        if name is not None:
            return getattr(self, name)
        return self.extra[key]

    def __setitem__(self, key: str, value: Any) -> None:
        name = self.flags().get(key)
        if name is not None:
            setattr(self, name, value)
        else:
            self.extra[key] = value

    def __contains__(self, key: object) -> bool:
        return key in self.flags() or key in self.extra

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.option_fields()) + len(self.extra)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        """Remove and return an :attr:`extra` entry (a flag cannot be removed)."""
        if key in self.flags():
            raise KeyError(f"{key!r} is an option of the method and cannot be removed")
        if default is _MISSING:
            return self.extra.pop(key)
        return self.extra.pop(key, default)

    def keys(self) -> list[str]:
        return list(self.to_dict())

    def items(self) -> list[tuple[str, Any]]:
        return list(self.to_dict().items())
