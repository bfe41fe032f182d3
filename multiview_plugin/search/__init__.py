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

__all__ = [
    "AGGREGATORS",
    "ApproximateSearch",
    "Aggregator",
    "Hit",
    "IndexMeta",
    "MaxAggregator",
    "MultiVectorSearcher",
    "VectorStore",
    "build_index",
    "get_aggregator",
    "search_batched",
    "search_shards",
]
