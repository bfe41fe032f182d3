"""Lazy exports for the package's ``__init__`` modules (PEP 562): a public name is imported from its submodule on
first use, so importing a package (and a driver's ``--help``) loads no heavy dependency it does not use."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], namespace: dict[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: ``exports`` maps a public name to the submodule that defines
    it (relative to ``package``, or a full dotted path); the first lookup imports it and keeps it in ``namespace``
    (the package's globals).

    >>> getattr_, dir_ = lazy_exports("os", {"join": "path"}, {})   # os.path.join, imported on first use
    >>> getattr_("join")("a", "b")
    'a/b'
    """

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = exports[name]
        module = where if "." in where else f"{package}.{where}"
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__
