"""Tests of multiview_plugin/search/aggregators.py: ranked vector hits → ranked documents."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiview_plugin.errors import ConfigError
from multiview_plugin.search.aggregators import (
    HasAnsAggregator,
    MaxAggregator,
    first_hits_walked,
    first_occurrences,
    get_aggregator,
    log_one_minus_softmax,
    take_ranked,
)


def test_max_keeps_each_documents_first_hit_in_rank_order():
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.5], [0.4, 0.3, -np.inf, -np.inf, -np.inf]], dtype=np.float32)
    docs = np.array([[3, 3, 1, 3, 0], [2, 2, -1, -1, -1]])
    assert first_occurrences(docs).tolist() == [[True, False, True, False, True], [True, False, False, False, False]]
    doc, score, found = MaxAggregator().aggregate(scores, docs, 4)
    assert doc.tolist() == [[3, 1, 0, -1], [2, -1, -1, -1]]
    np.testing.assert_allclose(score[0, :3], [0.9, 0.7, 0.5])
    assert np.isneginf(score[0, 3]) and found.tolist() == [3, 1]


@given(data=st.data(), n_q=st.integers(0, 4), fetched=st.integers(1, 24), k=st.integers(1, 30))
def test_walked_first_hits_equal_the_vectorised_ones(data, n_q, fetched, k):
    """Max aggregation walks small batches in Python (one interactive query) and vectorises large ones: the two
    give the same documents, scores (ties included) and counts, with nothing fetched (-1) anywhere in a row."""
    docs = np.array(data.draw(st.lists(st.lists(st.integers(-1, 6), min_size=fetched, max_size=fetched),
                                       min_size=n_q, max_size=n_q)), dtype=np.int64).reshape(n_q, fetched)
    values = st.sampled_from([0.5, 0.25, 0.0, -1.0])  # few values: ties between documents
    scores = np.array(data.draw(st.lists(st.lists(values, min_size=fetched, max_size=fetched),
                                         min_size=n_q, max_size=n_q)), dtype=np.float32).reshape(n_q, fetched)
    scores = -np.sort(-scores, axis=1)
    scores[docs < 0] = -np.inf
    walked = first_hits_walked(scores, docs, k)
    vectorised = take_ranked(first_occurrences(docs), docs, scores, k)
    for got, want in zip(walked, vectorised):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_hasans_equals_one_minus_the_product_of_its_sentences_misses():
    rng = np.random.default_rng(0)
    scores = np.sort(rng.standard_normal((1, 6)))[:, ::-1].copy()
    docs = np.array([[0, 1, 0, 2, 1, 1]])
    doc, has, found = HasAnsAggregator(temperature=0.5).aggregate(scores, docs, 3)
    p = np.exp(scores[0] / 0.5) / np.exp(scores[0] / 0.5).sum()
    want = {d: 1 - np.prod([1 - p[i] for i in range(6) if docs[0, i] == d]) for d in range(3)}
    assert doc[0].tolist() == sorted(want, key=want.get, reverse=True) and found.tolist() == [3]
    np.testing.assert_allclose(has[0], [want[d] for d in doc[0]], rtol=1e-5)


def test_log_one_minus_softmax_stays_finite_when_one_score_dominates():
    out = log_one_minus_softmax(np.array([[50.0, 0.0, 5.0]]), np.array([[True, True, False]]))
    assert out[0, 0] == pytest.approx(-50.0)  # log(e^0 / (e^50 + e^0)); 1 - p rounds to 0 in float64
    assert out[0, 2] == 0.0 and np.isfinite(out).all()


def test_get_aggregator_by_name_and_its_errors():
    assert isinstance(get_aggregator("max", temperature=0.1), MaxAggregator)
    agg = get_aggregator("hasans", temperature=0.1, fetch_docs=None)
    assert isinstance(agg, HasAnsAggregator) and agg.temperature == 0.1 and agg.fetch_docs == 100
    assert agg.initial_fetch(10, 2.5) == 250
    with pytest.raises(ConfigError, match="^unknown aggregation 'median'; known: hasans, max$"):
        get_aggregator("median")
    with pytest.raises(ConfigError, match="^hasans temperature must be > 0, got 0$"):
        HasAnsAggregator(temperature=0)
