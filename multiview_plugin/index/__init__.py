"""Building multi-vector index folders (Pyserini's split: ``index/`` writes them, ``search/`` reads them).

``build_index`` and its options (``IndexConfig``), the folder's ``multiview.json`` (``IndexMeta``). The names load
on first use (PEP 562), so importing a light submodule (``index.meta``: a driver's defaults) does not load Faiss."""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiview_plugin.lazy import lazy_exports

_EXPORTS = {"IndexConfig": "build", "build_index": "build", "IndexMeta": "meta"}

if TYPE_CHECKING:
    from multiview_plugin.index.build import IndexConfig, build_index
    from multiview_plugin.index.meta import IndexMeta


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = ["IndexConfig", "IndexMeta", "build_index"]
