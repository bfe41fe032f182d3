"""Multi-vector Faiss indexes and searchers (Pyserini-style API)."""

from multiview_plugin.search._backend import SearchBackend
from multiview_plugin.search._index import IndexMeta, build_index
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
