"""Tests of multiview_plugin/data/bm25.py: BM25 retrieval and hard negatives."""

from __future__ import annotations

from multiview_plugin.data.bm25 import bm25_negatives, bm25_search

PASSAGES = ["the cat sat on the mat", "a dog ran in the park", "cats and dogs play", "the moon is bright"]


def test_bm25_search_ranks_the_matching_passage_first_and_caps_k():
    idx, scores = bm25_search(PASSAGES, ["dog park", "moon"], 10)
    assert idx.shape == scores.shape == (2, 4)  # k capped at the corpus
    assert idx[0, 0] == 1 and idx[1, 0] == 3
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    empty, _ = bm25_search(PASSAGES, [], 3)
    assert empty.shape == (0, 3)


def test_bm25_negatives_skip_the_gold_passages():
    negatives = bm25_negatives(PASSAGES, ["dog park", "cat mat"], [1, [0, 2]], 2)
    assert 1 not in negatives[0] and len(negatives[0]) == 2
    assert not {0, 2} & set(negatives[1]) and len(negatives[1]) == 2
    assert bm25_negatives(PASSAGES, ["dog"], [1], 0) == [[]]
    assert len(bm25_negatives(PASSAGES, ["dog"], [1], 10)[0]) == 3  # fewer only when the corpus runs out
