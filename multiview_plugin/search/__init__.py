"""Multi-vector Faiss indexes and searchers (Pyserini-style API).

The names below load on first use (PEP 562), so importing one light submodule (``search.aggregators``: a
driver's ``--help``) does not load Faiss and every backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiview_plugin.lazy import lazy_exports

_EXPORTS = {
    "SearchBackend": "_backend",
    "IndexMeta": "multiview_plugin.index.meta", "build_index": "multiview_plugin.index.build",
    "ApproximateSearch": "_searcher", "FaissStore": "_searcher", "Hit": "_searcher",
    "MultiVectorSearcher": "_searcher", "search_batched": "_searcher", "search_shards": "_searcher",
    "AGGREGATORS": "aggregators", "Aggregator": "aggregators", "MaxAggregator": "aggregators",
    "get_aggregator": "aggregators",
    "Explanation": "explain", "ViewExplainer": "explain", "write_explanations": "explain",
}

if TYPE_CHECKING:
    from multiview_plugin.index.build import build_index
    from multiview_plugin.index.meta import IndexMeta
    from multiview_plugin.search._backend import SearchBackend
    from multiview_plugin.search._searcher import (
        ApproximateSearch,
        FaissStore,
        Hit,
        MultiVectorSearcher,
        search_batched,
        search_shards,
    )
    from multiview_plugin.search.aggregators import AGGREGATORS, Aggregator, MaxAggregator, get_aggregator
    from multiview_plugin.search.explain import Explanation, ViewExplainer, write_explanations


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "AGGREGATORS",
    "ApproximateSearch",
    "Aggregator",
    "Explanation",
    "FaissStore",
    "Hit",
    "IndexMeta",
    "MaxAggregator",
    "MultiVectorSearcher",
    "SearchBackend",
    "ViewExplainer",
    "build_index",
    "get_aggregator",
    "search_batched",
    "search_shards",
    "write_explanations",
]
