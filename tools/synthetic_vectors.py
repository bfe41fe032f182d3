"""Clustered synthetic multi-view vectors for approximate-search tests and benchmarks.

Real embeddings are clustered (topics) and a document's views are near each other; uniform random vectors
are neither, which makes ANN look better or worse than it is. Here: ``clusters`` topic centres; each document
sits near one centre, each of its views near the document; each query near one view of a random document.
All vectors are unit-normalised (cosine = inner product).
"""

from __future__ import annotations

import numpy as np


def _unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x


def iter_clustered_documents(n_docs: int, views: int, dim: int, clusters: int = 100, seed: int = 0,
                             doc_spread: float = 0.6, view_spread: float = 0.5, chunk: int = 65_536):
    """``clustered_documents`` in blocks: yields ``(start, block)``, block (n, views, dim) float32, the same values
    for the same arguments; for sets larger than memory (write each block to its own shard)."""
    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((clusters, dim), dtype=np.float32))
    scale = 1.0 / np.sqrt(dim)
    for start in range(0, n_docs, chunk):
        n = min(chunk, n_docs - start)
        docs = centres[rng.integers(0, clusters, n)]
        docs += doc_spread * scale * rng.standard_normal((n, dim), dtype=np.float32)
        block = docs[:, None, :] + view_spread * scale * rng.standard_normal((n, views, dim), dtype=np.float32)
        yield start, _unit(block).astype(np.float32, copy=False)  # float64 arithmetic (scale), float32 out


def clustered_documents(n_docs: int, views: int, dim: int, clusters: int = 100, seed: int = 0,
                        doc_spread: float = 0.6, view_spread: float = 0.5, chunk: int = 65_536) -> np.ndarray:
    """(n_docs, views, dim) float32 unit vectors: centre + doc offset + view offset (spreads relative to 1)."""
    out = np.empty((n_docs, views, dim), dtype=np.float32)
    for start, block in iter_clustered_documents(n_docs, views, dim, clusters, seed, doc_spread, view_spread, chunk):
        out[start:start + len(block)] = block  # chunked: bounded temporaries at 1M+ documents
    return out


def query_picks(n_docs: int, views: int, n_queries: int, seed: int = 1) -> tuple:
    """The (rng, document, view) draws of ``clustered_queries``: gather ``docs[document, view]`` as the bases
    (block by block for streamed documents), then ``queries_near(bases, rng)``."""
    rng = np.random.default_rng(seed)
    return rng, rng.integers(0, n_docs, n_queries), rng.integers(0, views, n_queries)


def queries_near(bases: np.ndarray, rng: np.random.Generator, spread: float = 0.5) -> np.ndarray:
    """Unit queries near ``bases`` (n_queries, dim)."""
    dim = bases.shape[1]
    return _unit(bases + spread / np.sqrt(dim) * rng.standard_normal(bases.shape, dtype=np.float32))


def clustered_queries(docs: np.ndarray, n_queries: int, seed: int = 1, spread: float = 0.5) -> np.ndarray:
    """(n_queries, dim) unit vectors, each near one random view of a random document of ``docs``."""
    rng, d, v = query_picks(docs.shape[0], docs.shape[1], n_queries, seed)
    return queries_near(docs[d, v], rng, spread)
