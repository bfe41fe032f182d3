"""Tests of multiview_plugin/data/sentences.py: splitting passages into sentences, answer and best-overlap sentences."""

from __future__ import annotations

from multiview_plugin.data.sentences import best_overlap_sentence, split_sentences
from tests.conftest import PASSAGES


def test_splitter_handles_abbreviations_and_mid_sentence_chunks():
    text = "of the war. Dr. Smith went to Washington D.C. in 1990. The U.S. army was"
    assert split_sentences(text) == ("of the war.", "Dr. Smith went to Washington D.C. in 1990.", "The U.S. army was")
    assert best_overlap_sentence("where was the city built", split_sentences(PASSAGES["d0"])) == 1
