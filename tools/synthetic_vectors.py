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


def clustered_documents(n_docs: int, views: int, dim: int, clusters: int = 100, seed: int = 0,
                        doc_spread: float = 0.6, view_spread: float = 0.5, chunk: int = 65_536) -> np.ndarray:
    """(n_docs, views, dim) float32 unit vectors: centre + doc offset + view offset (spreads relative to 1)."""
    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((clusters, dim), dtype=np.float32))
    out = np.empty((n_docs, views, dim), dtype=np.float32)
    scale = 1.0 / np.sqrt(dim)
    for start in range(0, n_docs, chunk):  # chunked: bounded temporaries at 1M+ documents
        n = min(chunk, n_docs - start)
        docs = centres[rng.integers(0, clusters, n)]
        docs += doc_spread * scale * rng.standard_normal((n, dim), dtype=np.float32)
        block = docs[:, None, :] + view_spread * scale * rng.standard_normal((n, views, dim), dtype=np.float32)
        out[start:start + n] = _unit(block)
    return out


def clustered_queries(docs: np.ndarray, n_queries: int, seed: int = 1, spread: float = 0.5) -> np.ndarray:
    """(n_queries, dim) unit vectors, each near one random view of a random document of ``docs``."""
    rng = np.random.default_rng(seed)
    n_docs, views, dim = docs.shape
    base = docs[rng.integers(0, n_docs, n_queries), rng.integers(0, views, n_queries)]
    return _unit(base + spread / np.sqrt(dim) * rng.standard_normal((n_queries, dim), dtype=np.float32))
