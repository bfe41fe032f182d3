"""Name → class registries for encoders and losses.

Built-in methods register themselves with decorators; third-party packages add their own through the
``multiview_plugin.encoders`` / ``multiview_plugin.losses`` entry-point groups, e.g. in ``pyproject.toml``::

    [project.entry-points."multiview_plugin.encoders"]
    my_model = "my_package.modeling:MyEncoder"

Unknown names fail with the list of known ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TypeVar

from multiview_plugin.errors import UnknownNameError

logger = logging.getLogger(__name__)

T = TypeVar("T")

ENCODER_ENTRY_POINT_GROUP = "multiview_plugin.encoders"
LOSS_ENTRY_POINT_GROUP = "multiview_plugin.losses"


class Registry:
    """A mapping from names to classes, filled by decorators and by an entry-point group."""

    def __init__(self, kind: str, entry_point_group: str):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._items: dict[str, type] = {}
        self._entry_points_loaded = False

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            if name in self._items and self._items[name] is not cls:
                raise ValueError(f"{self.kind} name {name!r} is already registered to {self._items[name]!r}")
            self._items[name] = cls
            cls.registered_name = name  # type: ignore[attr-defined]
            return cls

        return decorator

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name in self._items:
                continue
            try:
                self.register(ep.name)(ep.load())
            except Exception as err:  # a broken plugin must not break the built-in methods
                logger.warning("could not load %s plugin %r from %s: %s", self.kind, ep.name, ep.value, err)

    def get(self, name: str) -> type:
        _import_builtins()
        if name not in self._items:
            self._load_entry_points()
        if name not in self._items:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known {self.kind}s: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        _import_builtins()
        self._load_entry_points()
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownNameError:
            return False
        return True


ENCODERS = Registry("model", ENCODER_ENTRY_POINT_GROUP)
LOSSES = Registry("loss", LOSS_ENTRY_POINT_GROUP)


def register_encoder(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make an encoder selectable with ``--model_name NAME``."""
    return ENCODERS.register(name)


def register_loss(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a loss selectable with ``--loss_name NAME``."""
    return LOSSES.register(name)


def get_encoder_class(name: str) -> type:
    return ENCODERS.get(name)


def get_loss_class(name: str) -> type:
    return LOSSES.get(name)


def _import_builtins() -> None:
    # Importing the packages runs their @register_* decorators.
    import multiview_plugin.losses  # noqa: F401
    import multiview_plugin.modeling  # noqa: F401
