"""Multi-vector Faiss indexes and searchers (Pyserini-style API)."""

from multiview_plugin.search._index import IndexMeta, build_index
from multiview_plugin.search._searcher import (
    ApproximateSearch,
    Hit,
    MultiVectorSearcher,
    VectorStore,
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
    "Hit",
    "IndexMeta",
    "MaxAggregator",
    "MultiVectorSearcher",
    "VectorStore",
    "ViewExplainer",
    "build_index",
    "get_aggregator",
    "search_batched",
    "search_shards",
    "write_explanations",
]
