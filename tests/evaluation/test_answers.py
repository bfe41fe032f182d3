"""DPR top-k answer accuracy (evaluation/answers.py) and Pyserini's retrieval json."""

from __future__ import annotations

import json

import pytest

from multiview_plugin.errors import MultiViewError
from multiview_plugin.evaluation.answers import build_retrieval, retrieval_accuracy, topk_accuracy, write_retrieval_json


def test_topk_accuracy():
    hits = [[False, False, True], [True, False], [], [False] * 10, [False, True]]
    acc = topk_accuracy(hits, ks=(1, 2, 3, 20))
    assert acc == {"Top1": 20.0, "Top2": 40.0, "Top3": 60.0, "Top20": 60.0}
    assert topk_accuracy([], ks=(5,)) == {"Top5": 0.0}


def test_build_retrieval(tmp_path):
    run = {"0": [("p2", 9.0), ("p1", 8.5)], "1": [("p1", 3.0)], "extra": [("p1", 1.0)]}
    questions = {"0": "who built the eiffel tower", "1": "where is paris"}
    answers = {"0": ["Gustave Eiffel"], "1": ["France"], "2": ["never retrieved"]}
    passages = {"p1": ("Gustave Eiffel", "The tower was built by Gustave Eiffel's company."),
                "p2": "Paris is the capital of France."}
    retrieval = build_retrieval(run, questions, answers, passages, depth=5)
    assert list(retrieval) == ["0", "1", "2"]
    item = retrieval["0"]
    assert item["question"] == questions["0"] and item["answers"] == ["Gustave Eiffel"]
    assert item["contexts"] == [
        {"docid": "p2", "score": 9.0, "text": "\nParis is the capital of France.", "has_answer": False},
        {"docid": "p1", "score": 8.5, "text": "Gustave Eiffel\nThe tower was built by Gustave Eiffel's company.",
         "has_answer": True},
    ]
    assert retrieval["1"]["contexts"][0]["has_answer"] is False  # the title is not matched
    assert retrieval["2"] == {"question": "", "answers": ["never retrieved"], "contexts": []}
    assert retrieval_accuracy(retrieval, ks=(1, 2)) == pytest.approx({"Top1": 0.0, "Top2": 100 / 3})
    # Pyserini's fallback: no has_answer -> match the text after the first newline
    for ctx in retrieval["0"]["contexts"]:
        del ctx["has_answer"]
    assert retrieval_accuracy(retrieval, ks=(1, 2)) == pytest.approx({"Top1": 0.0, "Top2": 100 / 3})
    path = write_retrieval_json(retrieval, tmp_path / "out" / "retrieval.json")
    assert json.loads(path.read_text(encoding="utf-8")) == retrieval
    slim = build_retrieval(run, questions, answers, passages, depth=1, store_text=False)
    assert slim["0"]["contexts"] == [{"docid": "p2", "score": 9.0, "has_answer": False}]
    with pytest.raises(MultiViewError, match="'p1'.*not in the corpus"):
        build_retrieval(run, questions, answers, {"p2": "x"})
