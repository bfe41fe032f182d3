"""Building multi-vector index folders (Pyserini's split: ``index/`` writes them, ``search/`` reads them).

``build_index`` and its options (``IndexConfig``), the folder's ``multiview.json`` (``IndexMeta``). The names load
on first use (PEP 562), so importing a light submodule (``index.meta``: a driver's defaults) does not load Faiss."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {"IndexConfig": "build", "build_index": "build", "IndexMeta": "meta"}

if TYPE_CHECKING:
    from multiview_plugin.index.build import IndexConfig, build_index
    from multiview_plugin.index.meta import IndexMeta


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = ["IndexConfig", "IndexMeta", "build_index"]
