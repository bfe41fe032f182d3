"""Open-domain QA retrieval accuracy: does a top-k passage contain an answer?

Answers are matched as DPR does (and Pyserini's ``evaluate_dpr_retrieval``), by
:func:`multiview_plugin.data.answers.has_answer` (its rules are in that module's docstring), so top-k accuracies
compare with published numbers; questions and answers are read by :func:`multiview_plugin.data.answers.load_qa`.

The retrieval json is Pyserini's: ``{qid: {"question", "answers", "contexts": [{"docid", "score", "text",
"has_answer"}]}}`` with ``text = "title\\ntext"``, which ``pyserini.eval.evaluate_dpr_retrieval`` reads
(it uses ``has_answer`` when present, else matches the part after the first newline).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.data.answers import has_answer
from multiview_plugin.errors import MultiViewError
from multiview_plugin.evaluation.runs import Run, atomic_open

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike
Passage = str | tuple[str | None, str]


def topk_accuracy(hits_has_answer: Sequence[Sequence[bool]], ks: Sequence[int] = (1, 5, 20, 100)) -> dict[str, float]:
    """Top-k accuracy: the percentage of questions with an answer-bearing passage among their first k.

    Parameters
    ----------
    hits_has_answer : Sequence[Sequence[bool]]
        Per question, the ``has_answer`` flag of each retrieved passage in rank order (lists may differ in
        length; a question with no passages counts as a miss).
    ks : Sequence[int]
        Cutoffs.

    Returns
    -------
    dict[str, float]
        ``{"Top1": ..., "Top5": ...}`` in percent (0 for every k when there are no questions).

    Examples
    --------
    >>> topk_accuracy([[False, True], [True], [], [False, False, False]], ks=(1, 2))
    {'Top1': 25.0, 'Top2': 50.0}
    """
    ks = [int(k) for k in ks]
    n = len(hits_has_answer)
    if n == 0:
        logger.warning("no questions: every top-k accuracy is 0")
        return {f"Top{k}": 0.0 for k in ks}
    width = max(1, max(map(len, hits_has_answer)))
    flags = np.zeros((n, width), dtype=bool)
    for row, hits in enumerate(hits_has_answer):
        flags[row, :len(hits)] = np.asarray(hits, dtype=bool)
    first_hit = np.where(flags.any(axis=1), flags.argmax(axis=1), np.iinfo(np.int64).max)  # max: no hit
    return {f"Top{k}": float(100.0 * np.mean(first_hit < k)) for k in ks}


def _split_passage(passage: Passage) -> tuple[str, str]:
    if isinstance(passage, str):
        return "", passage
    title, text = passage
    return title or "", text


def build_retrieval(run: Run, questions: Mapping[str, str], answers: Mapping[str, Sequence[str]],
                    passages: Mapping[str, Passage], depth: int = 100, regex: bool = False,
                    lenient: bool = False, store_text: bool = True) -> dict[str, dict[str, Any]]:
    """Pyserini's DPR retrieval json for a run.

    Parameters
    ----------
    run : Run
        ``{qid: [(docid, score)]}`` in rank order.
    questions : Mapping[str, str]
        Question text per qid (``""`` where unknown).
    answers : Mapping[str, Sequence[str]]
        Answers per qid. **Every** question here gets an entry, in this order; one the run does not answer
        gets no contexts (and so counts as a miss). Run queries without answers are left out.
    passages : Mapping[str, str or (title, text)]
        Docid -> passage. A ``(title, text)`` pair keeps the title out of the matching (as DPR does);
        a plain string is the text, without title.
    depth : int
        Contexts kept per question.
    regex : bool
        Answers are regular expressions (CuratedTREC).
    lenient : bool
        See :func:`has_answer`.
    store_text : bool
        Keep each context's ``"title\\ntext"``; without it the json is much smaller and still enough for
        Pyserini's evaluation, which uses ``has_answer`` (like Pyserini's converter without ``--store-raw``).

    Returns
    -------
    dict
        ``{qid: {"question": str, "answers": list[str], "contexts": [{"docid": str, "score": float,
        "text": "title\\ntext", "has_answer": bool}]}}``.

    Raises
    ------
    MultiViewError
        A retrieved docid is not in ``passages``.
    """
    unanswered = [qid for qid in run if qid not in answers]
    if unanswered:
        logger.warning("%d of the run's %d queries have no answers and are left out (e.g. %s)",
                       len(unanswered), len(run), unanswered[:3])
    missing = sum(qid not in run for qid in answers)
    if missing:
        logger.warning("%d of the %d questions are not in the run; they count as misses", missing, len(answers))
    retrieval: dict[str, dict[str, Any]] = {}
    for qid, answer_list in answers.items():
        contexts = []
        for docid, score in run.get(qid, ())[:depth]:
            if docid not in passages:
                raise MultiViewError(f"docid {docid!r} (retrieved for query {qid!r}) is not in the corpus; "
                                     "was the run made with another corpus?")
            title, text = _split_passage(passages[docid])
            context: dict[str, Any] = {"docid": docid, "score": float(score)}
            if store_text:
                context["text"] = f"{title}\n{text}"
            context["has_answer"] = has_answer(answer_list, text, regex=regex, lenient=lenient)
            contexts.append(context)
        retrieval[qid] = {"question": questions.get(qid, ""), "answers": list(answer_list), "contexts": contexts}
    return retrieval


def retrieval_accuracy(retrieval: Mapping[str, Mapping[str, Any]], ks: Sequence[int] = (1, 5, 20, 100),
                       regex: bool = False, lenient: bool = False) -> dict[str, float]:
    """Top-k accuracy (percent) of a retrieval json, like ``pyserini.eval.evaluate_dpr_retrieval``.

    Uses each context's ``has_answer`` flag; a context without one is matched against the part of its
    ``text`` after the first newline (the title comes before it), as Pyserini does.
    """
    hits = []
    for qid, item in retrieval.items():
        flags = []
        for ctx in item.get("contexts", ()):
            if "has_answer" in ctx:
                flags.append(bool(ctx["has_answer"]))
            else:
                text = ctx.get("text")
                if text is None:
                    raise MultiViewError(f"retrieval entry {qid!r}: a context has neither 'has_answer' nor 'text'")
                flags.append(has_answer(item["answers"], text.split("\n", 1)[-1], regex=regex, lenient=lenient))
        hits.append(flags)
    return topk_accuracy(hits, ks)


def write_retrieval_json(retrieval: Mapping[str, Any], path: PathLike) -> Path:
    """Write a retrieval json atomically (UTF-8, non-ASCII kept); returns ``path``."""
    path = Path(path)
    with atomic_open(path) as f:
        json.dump(retrieval, f, ensure_ascii=False, indent=1)
        f.write("\n")
    logger.info("wrote retrieval json %s (%d questions)", path, len(retrieval))
    return path
