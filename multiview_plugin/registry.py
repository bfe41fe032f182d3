"""Name → class registries for encoders and losses.

Built-in methods register themselves with decorators; third-party packages add their own through the
``multiview_plugin.encoders`` / ``multiview_plugin.losses`` entry-point groups, e.g. in ``pyproject.toml``::

    [project.entry-points."multiview_plugin.encoders"]
    my_model = "my_package.modeling:MyEncoder"

The built-in ones are listed here the same way (``name -> "module:Class"``) and their module is imported on the
first lookup of their name, as an entry point's is: the registry imports no module of the package, so nothing
below the methods (a saved config naming its method, the model loader) reaches up to them through an import
(no import circle, ``tests/test_import_cycles.py``). ``tests/test_registry.py`` checks that each listed class
registers itself under its listed name.

Unknown names fail with the list of known ones.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import TypeVar

from multiview_plugin.errors import UnknownNameError

logger = logging.getLogger(__name__)

T = TypeVar("T")

ENCODER_ENTRY_POINT_GROUP = "multiview_plugin.encoders"
LOSS_ENTRY_POINT_GROUP = "multiview_plugin.losses"

# the built-in methods and losses, as entry points: "module:Class"
BUILTIN_ENCODERS = {
    "dpr": "multiview_plugin.modeling.dpr:DprEncoder",
    "mvr": "multiview_plugin.modeling.mvr:MvrEncoder",
    "mlr": "multiview_plugin.modeling.mlr:MlrEncoder",
    "mebert": "multiview_plugin.modeling.mebert:MebertEncoder",
    "dcsr": "multiview_plugin.modeling.dcsr:DcsrEncoder",
    "dce": "multiview_plugin.modeling.dce:DceEncoder",
}
# the built-in methods' options classes, in a module without torch: the train driver's --help lists their flags
# without importing the encoders (a method not listed here, a plugin's, is asked for its ``options_class``)
BUILTIN_OPTIONS = {
    "mvr": "multiview_plugin.modeling.method_options:MvrOptions",
    "mlr": "multiview_plugin.modeling.method_options:MlrOptions",
    "mebert": "multiview_plugin.modeling.method_options:MebertOptions",
    "dcsr": "multiview_plugin.modeling.method_options:DcsrOptions",
}
BUILTIN_LOSSES = {
    "contrastive": "multiview_plugin.losses.contrastive:ContrastiveLoss",
    "mvr_global_local": "multiview_plugin.losses.global_local:GlobalLocalLoss",
    "mlr_self_contrastive": "multiview_plugin.losses.self_contrastive:SelfContrastiveLoss",
}


class Registry:
    """A mapping from names to classes, filled by decorators and by an entry-point group."""

    def __init__(self, kind: str, entry_point_group: str, builtins: Mapping[str, str] | None = None):
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.builtins = dict(builtins or {})
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
            if ep.name in self._items or ep.name in self.builtins:  # a built-in's name stays the built-in's
                continue
            try:
                self.register(ep.name)(ep.load())
            except Exception as err:  # a broken plugin must not break the built-in methods
                logger.warning("could not load %s plugin %r from %s: %s", self.kind, ep.name, ep.value, err)

    def _load_builtin(self, name: str) -> None:
        """Import a built-in's module (its decorator registers it) and check that it registered the listed class."""
        module, _, attribute = self.builtins[name].partition(":")
        cls = getattr(importlib.import_module(module), attribute)
        if name not in self._items and getattr(cls, "registered_name", None) == name:
            self._items[name] = cls  # imported before under this name (its decorator ran), then the table was reset
        if self._items.get(name) is not cls:
            raise RuntimeError(f"built-in {self.kind} {name!r}: {self.builtins[name]} did not register itself "
                               f"under that name (registry.py lists it)")

    def get(self, name: str) -> type:
        if name not in self._items and name in self.builtins:
            self._load_builtin(name)
        if name not in self._items:  # every built-in's package (a method added beside them registers), then plugins
            self._load_builtins()
            self._load_entry_points()
        if name not in self._items:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known {self.kind}s: {', '.join(self.names())}")
        return self._items[name]

    def _load_builtins(self) -> None:
        for name in self.builtins:
            if name not in self._items:
                self._load_builtin(name)

    def names(self) -> list[str]:
        self._load_builtins()
        self._load_entry_points()
        return sorted(self._items)

    def listed_names(self) -> list[str]:
        """Every name, without importing the built-ins (their names are listed; plugins are loaded)."""
        self._load_entry_points()
        return sorted(set(self.builtins) | set(self._items))

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownNameError:
            return False
        return True


ENCODERS = Registry("model", ENCODER_ENTRY_POINT_GROUP, BUILTIN_ENCODERS)
LOSSES = Registry("loss", LOSS_ENTRY_POINT_GROUP, BUILTIN_LOSSES)


def register_encoder(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make an encoder selectable with ``--model_name NAME``."""
    return ENCODERS.register(name)


def register_loss(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a loss selectable with ``--loss_name NAME``."""
    return LOSSES.register(name)


def get_encoder_class(name: str) -> type:
    return ENCODERS.get(name)


def get_options_class(name: str) -> type | None:
    """A method's options class: a built-in's from ``BUILTIN_OPTIONS`` (no encoder imported), a plugin's from its
    encoder's ``options_class``; None for a method without one of its own (dpr, dce)."""
    if name in BUILTIN_OPTIONS:
        module, _, attribute = BUILTIN_OPTIONS[name].partition(":")
        return getattr(importlib.import_module(module), attribute)
    if name in ENCODERS.builtins:
        return None
    return getattr(ENCODERS.get(name), "options_class", None)


def get_loss_class(name: str) -> type:
    return LOSSES.get(name)

