"""Sentences of a passage, and which of them answer a query (DCSR's training unit).

Splitting uses pysbd (Sadvilkar & Neumann, 2020): rule-based, no downloads, and with ``clean=False`` its
segments concatenate back to the exact input, so nothing of a passage is lost. It handles abbreviations
("Dr.", "U.S.", "D.C."), and a DPR 100-word chunk that starts or ends mid-sentence simply yields a leading
or trailing fragment, which becomes a sentence of its own (its marker still sees the whole passage).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence

from multiview_plugin.data.answers import has_answer

_WORD = re.compile(r"\w+", re.UNICODE)
# A small English stop list: overlap on "the"/"of" says nothing about which sentence a query is about.
STOPWORDS = frozenset("""a an and are as at be but by for from has have he her his how i if in into is it its
    of on or she so such than that the their them then there these they this to was were what when where which
    who whom why will with would you your do does did not no can could""".split())


@functools.lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False)


@functools.lru_cache(maxsize=1 << 16)
def split_sentences(text: str) -> tuple[str, ...]:
    """The sentences of ``text``, stripped, empty ones dropped; at least one for non-empty text.

    Cached: training draws the same passages every epoch.

    Examples
    --------
    >>> split_sentences("of the war. Dr. Smith went to Washington D.C. in 1990. The U.S. army was")
    ('of the war.', 'Dr. Smith went to Washington D.C. in 1990.', 'The U.S. army was')
    >>> split_sentences("   ")
    ()
    """
    if not text.strip():
        return ()
    sentences = tuple(s.strip() for s in _segmenter().segment(text))
    return tuple(s for s in sentences if s) or (text.strip(),)


def sentence_spans(text: str, sentences: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans [start, end) of ``sentences`` (stripped pieces of ``text``, in order) in ``text``;
    (-1, -1) for one not found.

    >>> text = "Paris is in France.  It has the Eiffel Tower."
    >>> [text[a:b] for a, b in sentence_spans(text, split_sentences(text))]
    ['Paris is in France.', 'It has the Eiffel Tower.']
    """
    spans, pos = [], 0
    for sentence in sentences:
        start = text.find(sentence, pos)
        if start < 0:
            spans.append((-1, -1))
            continue
        spans.append((start, start + len(sentence)))
        pos = start + len(sentence)
    return spans


def token_spans(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token spans [first, last + 1) of the character ``spans`` (in order, from :func:`sentence_spans`), read from a
    fast tokenizer's ``offset_mapping`` of the same text: a token belongs to the span its first character falls
    in; special tokens ((0, 0)) belong to none. A span that holds no token (cut off by truncation, or not found)
    is left out, so a truncated passage keeps the sentences it still shows, the last one possibly cut short.

    >>> token_spans([(0, 0), (0, 5), (6, 8), (8, 9), (10, 12), (0, 0)], [(0, 9), (10, 20), (21, 30)])
    [(1, 4), (4, 5)]
    """
    starts = [a for a, b in offsets if b > a]
    index = [t for t, (a, b) in enumerate(offsets) if b > a]
    out = []
    for start, end in spans:
        first, last = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)
        if start >= 0 and last > first:
            out.append((index[first], index[last - 1] + 1))
    return out


def answer_sentences(sentences: Sequence[str], answers: Sequence[str]) -> list[int]:
    """Indices of the sentences that contain an answer (DPR's normalised token match, as in evaluation).

    >>> answer_sentences(["Paris is in France.", "It has the Eiffel Tower."], ["eiffel tower"])
    [1]
    """
    return [i for i, s in enumerate(sentences) if has_answer(answers, s)]


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


def best_overlap_sentence(query: str, sentences: Sequence[str]) -> int:
    """The sentence sharing the most distinct content words with ``query`` (ties: the earliest).

    The positive for datasets without answer strings (MS MARCO, BEIR).

    >>> best_overlap_sentence("when was the tower built", ["It is tall.", "The tower was built in 1889."])
    1
    """
    words = content_words(query)
    overlaps = [len(words & content_words(s)) for s in sentences]
    return max(range(len(sentences)), key=lambda i: (overlaps[i], -i))
