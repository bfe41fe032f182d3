"""Tests of tools/synthetic_vectors.py: clustered synthetic multi-view vectors."""

from __future__ import annotations

import numpy as np

from tools.synthetic_vectors import clustered_documents, clustered_queries


def test_documents_are_unit_clustered_and_reproducible():
    docs = clustered_documents(200, 3, 16, clusters=4, seed=5, chunk=64)  # several chunks
    assert docs.shape == (200, 3, 16) and docs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(docs, clustered_documents(200, 3, 16, clusters=4, seed=5, chunk=64))
    # a document's views are nearer each other than two random documents' views are
    same = (docs[:, 0] * docs[:, 1]).sum(-1).mean()
    other = (docs[:-1, 0] * docs[1:, 0]).sum(-1).mean()
    assert same > other + 0.2


def test_queries_lie_near_a_view():
    docs = clustered_documents(50, 2, 32, clusters=5)
    queries = clustered_queries(docs, 20, spread=0.1)
    assert queries.shape == (20, 32)
    np.testing.assert_allclose(np.linalg.norm(queries, axis=-1), 1.0, rtol=1e-5)
    best = (queries @ docs.reshape(-1, 32).T).max(axis=1)
    assert (best > 0.95).all()


def test_streamed_blocks_and_their_queries_equal_the_whole_set():
    from tools.synthetic_vectors import iter_clustered_documents, queries_near, query_picks

    docs = clustered_documents(150, 4, 8, clusters=3, seed=2, chunk=64)
    rng, d, v = query_picks(150, 4, 30)
    bases = np.empty((30, 8), dtype=np.float32)
    for start, block in iter_clustered_documents(150, 4, 8, clusters=3, seed=2, chunk=64):
        np.testing.assert_array_equal(block, docs[start:start + len(block)])
        here = (d >= start) & (d < start + len(block))
        bases[here] = block[d[here] - start, v[here]]
    np.testing.assert_array_equal(queries_near(bases, rng), clustered_queries(docs, 30))
