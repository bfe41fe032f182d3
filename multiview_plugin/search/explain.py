"""Explained hits: which view of a retrieved document matched the query, and what that view is.

For a hit (query q, document d) the explanation scores q against every vector of d (read back from the index,
so it is the score the index itself computes), and reports the winning view j, its score, the runner-up view's
score (None for a one-view document), the number of views, and, where the index records it
(:mod:`multiview_plugin.encoding.view_info`), what view j is: DCSR's sentence (text and character span in the
passage), DCE's pseudo-query, MLR's layer, MVR's viewer token, ME-BERT's token position. Texts are read from the
corpus and pseudo-query files recorded at encoding time (or those given), only for the documents hit.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.atomic import atomic_open
from multiview_plugin.search._backend import SearchBackend

logger = logging.getLogger(__name__)

# view kind → the key its label goes under in an explanation
LABEL_KEYS = {"viewer": "viewer", "layer": "layer", "token": "token_position"}


@dataclass(frozen=True)
class Explanation:
    """Why a document was retrieved: its best view (index j of ``docid#j``) and what that view is."""

    view: int
    view_score: float
    runner_up_score: float | None
    num_views: int
    what: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(out.pop("what") or {})
        return out


class ViewExplainer:
    """Explains hits of a search backend (:class:`~multiview_plugin.search._backend.SearchBackend`).

    Parameters
    ----------
    store : the searched vectors (rows of a document contiguous).
    views : the index's view description (``multiview.json`` ``extra["view_info"]``), None for older indexes.
    rows : per-vector rows (``views.npy``, memory-mapped) for views that differ by document (DCSR), or None.
    corpus : passage texts by docid, or corpus file(s), instead of the corpus recorded in ``views``.
    pseudo_queries : DCE's pseudo-query file, instead of the one recorded in ``views``.
    """

    def __init__(self, store: SearchBackend, views: dict | None = None, rows: np.ndarray | None = None,
                 corpus: Mapping[str, str] | str | os.PathLike | Sequence[str] | None = None,
                 pseudo_queries: str | None = None):
        self.store = store
        self.views = views or {}
        self.rows = rows
        self.corpus = corpus if corpus is not None else self.views.get("corpus")
        self.pseudo_queries = pseudo_queries or self.views.get("pseudo_queries")
        self._doc_index: dict[str, int] | None = None
        self._warned: set[str] = set()

    def doc_index(self, docid: str) -> int:
        if self._doc_index is None:
            self._doc_index = {d: i for i, d in enumerate(self.store.docids.tolist())}
        return self._doc_index[docid]

    def doc_vectors(self, doc: int) -> np.ndarray:
        """Document ``doc``'s views as its backend scores them (:meth:`SearchBackend.doc_vectors`)."""
        return self.store.doc_vectors(doc)

    def explain(self, q_reps: np.ndarray, docids: np.ndarray) -> list[list[Explanation | None]]:
        """Explanations for a (Q, k) docid array (None entries stay None) given the (Q, D) query vectors."""
        q_reps = np.asarray(q_reps, dtype=np.float32)
        out: list[list[Explanation | None]] = []
        wanted: list[tuple[int, int, int, int]] = []  # (query, rank, doc, view)
        for qi, row in enumerate(docids.tolist()):
            found: list[Explanation | None] = []
            for rank, docid in enumerate(row):
                if docid is None:
                    found.append(None)
                    continue
                doc = self.doc_index(docid)
                scores = self.doc_vectors(doc) @ q_reps[qi]
                j = int(np.argmax(scores))
                runner = float(np.partition(scores, -2)[-2]) if len(scores) > 1 else None
                found.append(Explanation(j, float(scores[j]), runner, len(scores)))
                wanted.append((qi, rank, doc, j))
            out.append(found)
        whats = self.describe([(doc, j) for _, _, doc, j in wanted])
        for (qi, rank, _, _), what in zip(wanted, whats):
            if what is not None:
                e = out[qi][rank]
                out[qi][rank] = Explanation(e.view, e.view_score, e.runner_up_score, e.num_views, what)
        return out

    # ------------------------------------------------------------------ what a view is
    def describe(self, doc_views: list[tuple[int, int]]) -> list[dict[str, Any] | None]:
        """What view j of document doc is, for each (doc, j); None where the index does not record it."""
        kind = self.views.get("kind")
        labels = self.views.get("labels")
        if kind in LABEL_KEYS:
            key = LABEL_KEYS[kind]
            return [{key: labels[j] if labels and j < len(labels) else j} for _, j in doc_views]
        if kind == "sentence" and self.rows is not None:
            return self._sentences(doc_views)
        if kind == "pseudo_query":
            return self._pseudo_queries(doc_views)
        return [None] * len(doc_views)

    def _sentences(self, doc_views: list[tuple[int, int]]) -> list[dict[str, Any]]:
        texts = self._texts({self.store.docids[doc] for doc, _ in doc_views})
        out = []
        for doc, j in doc_views:
            start, end, cut = (int(x) for x in self.rows[self.store.doc_start[doc] + j])
            if self.views.get("passage_view") and j == self.store.doc_views[doc] - 1:  # dcsr_passage_view: the last
                what: dict[str, Any] = {"passage": True, "span": [start, end]}
            else:
                what = {"sentence_index": j, "span": [start, end], "cut": bool(cut)}
            text = texts.get(self.store.docids[doc])
            if text is not None and "sentence_index" in what:
                what["sentence"] = text[start:end]
            out.append(what)
        return out

    def _pseudo_queries(self, doc_views: list[tuple[int, int]]) -> list[dict[str, Any]]:
        queries = self._load_queries({self.store.docids[doc] for doc, _ in doc_views})
        out = []
        for doc, j in doc_views:
            what: dict[str, Any] = {"pseudo_query_index": j}
            if queries is not None:
                mine = queries.get(self.store.docids[doc], [])
                what["pseudo_query"] = mine[j] if j < len(mine) else ""  # "": encoded without a query
            out.append(what)
        return out

    def _corpus_files(self) -> list[str]:
        if self.corpus is None or isinstance(self.corpus, Mapping):
            return []
        files = [self.corpus] if isinstance(self.corpus, (str, os.PathLike)) else list(self.corpus)
        missing = [str(f) for f in files if not Path(f).is_file()]
        if missing:
            self._warn(f"corpus {missing[0]} not found: explanations give spans without texts (pass corpus=)")
            return []
        return [str(f) for f in files]

    def _texts(self, docids: set[str]) -> dict[str, str]:
        if isinstance(self.corpus, Mapping):
            return {d: self.corpus[d] for d in docids if d in self.corpus}
        from multiview_plugin.data.readers import iter_corpus

        separator = self.views.get("separator", " ")
        return {d: t for path in self._corpus_files() for d, t in iter_corpus(path, separator) if d in docids}

    def _load_queries(self, docids: set[str]) -> dict[str, list[str]] | None:
        if not self.pseudo_queries:
            return None
        from multiview_plugin.data.pseudo_queries import load_pseudo_queries
        from multiview_plugin.data.readers import iter_corpus

        paths = str(self.pseudo_queries).split(",")
        if not all(Path(p).is_file() for p in paths):
            self._warn(f"pseudo-query file {self.pseudo_queries} not found: explanations give query indices only")
            return None
        corpus_docids = None
        if all(p.removesuffix(".gz").endswith(".txt") for p in paths):  # aligned by line to the corpus
            files = self._corpus_files()
            if not files:
                return None
            corpus_docids = [d for path in files for d, _ in iter_corpus(path, self.views.get("separator", " "))]
        return load_pseudo_queries(self.pseudo_queries, corpus_docids, keep=docids)

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning(message)


def write_explanations(path: str | os.PathLike, q_ids: Sequence[str], docids: np.ndarray, scores: np.ndarray,
                       explanations: list[list[Explanation | None]]) -> int:
    """A JSONL side file, one line per hit: ``{"qid", "docid", "rank", "score", "view", "view_score",
    "runner_up_score", "num_views", ...what}``; returns the number of lines (written atomically)."""
    n = 0
    with atomic_open(path) as f:
        for qid, row_d, row_s, row_e in zip(q_ids, docids.tolist(), scores.tolist(), explanations):
            for rank, (docid, score, e) in enumerate(zip(row_d, row_s, row_e), start=1):
                if docid is None or e is None:
                    continue
                record = {"qid": qid, "docid": docid, "rank": rank, "score": float(score), **e.to_dict()}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1
    return n
