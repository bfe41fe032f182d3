"""Ranking metrics (evaluation/metrics.py): ir_measures against hand-computed values and our numpy cross-check."""

from __future__ import annotations

import math
import random

import pytest

from multiview_plugin.data.readers import load_qrels
from multiview_plugin.errors import ConfigError
from multiview_plugin.evaluation.metrics import evaluate_run, own_metrics
from tests.conftest import shared_data_dir


def test_hand_computed_metrics():
    qrels = {"q1": {"d1": 1, "d2": 1, "d9": 0}, "q2": {"e1": 2, "e2": 1}, "q3": {"f1": 1}}
    run = {
        "q1": [("x", 3.0), ("d1", 2.0), ("d9", 1.5), ("d2", 1.0)],  # hits at ranks 2 and 4
        "q2": [("e2", 5.0), ("e1", 4.0)],                          # graded: 1 then 2
        # q3 missing from the run: counts as 0
        "q4": [("z", 1.0)],                                        # not judged: ignored
    }
    log2 = math.log2
    expected = {
        "MRR@10": (1 / 2 + 1 + 0) / 3,
        "R@2": (1 / 2 + 1 + 0) / 3,
        "R@10": (1 + 1 + 0) / 3,
        "nDCG@10": ((1 / log2(3) + 1 / log2(5)) / (1 + 1 / log2(3))
                    + (1 + 2 / log2(3)) / (2 + 1 / log2(3)) + 0) / 3,
        "P@2": (1 / 2 + 1 + 0) / 3,
    }
    got = evaluate_run(run, qrels, list(expected))
    assert got == pytest.approx(expected, abs=1e-9)
    own = own_metrics(run, qrels, ks=(2, 10))
    assert {k: own[k] for k in expected} == pytest.approx(expected, abs=1e-9)
    # rel_level 2: only e1 is relevant for q2 (rank 2); nDCG is unchanged
    strict = evaluate_run(run, qrels, ["MRR@10", "nDCG@10"], rel_level=2)
    assert strict["MRR@10"] == pytest.approx((0 + 1 / 2 + 0) / 3)
    assert strict["nDCG@10"] == pytest.approx(expected["nDCG@10"])


def test_metric_names():
    run, qrels = {"q": [("a", 1.0)]}, {"q": {"a": 1}}
    got = evaluate_run(run, qrels, ["mrr@10", "Recall@5", "NDCG@3", "MAP", "Success@1", "RR(rel=1)@10"])
    assert all(v == pytest.approx(1.0) for v in got.values())
    with pytest.raises(ConfigError, match="unknown metric 'bogus@3'.*MRR@10"):
        evaluate_run(run, qrels, ["bogus@3"])
    with pytest.raises(ConfigError, match="needs a cutoff"):
        evaluate_run(run, qrels, ["R"])


def random_case(rng: random.Random, n_queries: int, n_docs: int, min_rel: int, max_rel: int):
    docs = [f"d{i}" for i in range(n_docs)]
    qrels, run = {}, {}
    for q in range(n_queries):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 15))
        qrels[qid] = {d: rng.randint(min_rel, max_rel) for d in judged}
        if q % 7 == 3:
            continue  # judged but not retrieved
        retrieved = rng.sample(docs, rng.randint(0, 120))
        if q % 5 == 1:  # nothing relevant retrieved
            retrieved = [d for d in retrieved if qrels[qid].get(d, 0) <= 0]
        scores = sorted((rng.random() for _ in retrieved), reverse=True)
        run[qid] = list(zip(retrieved, scores))
    run["unjudged"] = [("d1", 1.0)]
    return run, qrels


@pytest.mark.parametrize("min_rel,max_rel,rel_level", [(0, 1, 1), (0, 3, 1), (0, 3, 2), (-1, 2, 1)])
def test_own_metrics_match_ir_measures_random(min_rel, max_rel, rel_level):
    # binary, graded, a stricter relevance level, and negative judgments (gain 0 in nDCG, as trec_eval)
    rng = random.Random(max_rel * 10 + rel_level - min_rel)
    run, qrels = random_case(rng, n_queries=60, n_docs=300, min_rel=min_rel, max_rel=max_rel)
    ks = (1, 3, 10, 100)
    names = [f"{m}@{k}" for k in ks for m in ("MRR", "R", "nDCG", "P")]
    expected = evaluate_run(run, qrels, names, rel_level=rel_level)
    got = own_metrics(run, qrels, ks=ks, rel_level=rel_level)
    assert {n: got[n] for n in names} == pytest.approx(expected, abs=1e-6)


def test_own_metrics_match_ir_measures_dl19():
    data = shared_data_dir()
    path = data / "anserini" / "qrels" / "qrels.dl19-passage.txt" if data else None
    if path is None or not path.is_file():
        pytest.skip("shared data (qrels.dl19-passage.txt) not available")
    qrels = load_qrels(path)
    rng = random.Random(19)
    run = {}
    for i, (qid, judged) in enumerate(qrels.items()):
        if i % 9 == 4:
            continue
        docids = list(judged)
        if i % 6 == 2:
            docids = [d for d in docids if judged[d] == 0]  # no relevant document retrieved
        rng.shuffle(docids)
        docids = docids[:rng.randint(5, 400)] + [f"unjudged{j}" for j in range(20)]
        rng.shuffle(docids)
        run[qid] = [(d, 1000.0 - r) for r, d in enumerate(docids)]
    ks = (10, 100, 1000)
    for rel_level in (1, 2):
        names = [f"{m}@{k}" for k in ks for m in ("MRR", "R", "nDCG")]
        expected = evaluate_run(run, qrels, names, rel_level=rel_level)
        got = own_metrics(run, qrels, ks=ks, rel_level=rel_level)
        assert {n: got[n] for n in names} == pytest.approx(expected, abs=1e-6)
        assert 0 < expected["nDCG@10"] < 1


def test_list_order_is_the_ranking():
    # tied scores and duplicates: the list order decides, the first occurrence counts
    qrels = {"q": {"b": 1}}
    run = {"q": [("a", 1.0), ("b", 1.0), ("a", 0.5)]}
    assert evaluate_run(run, qrels, ["MRR@10"])["MRR@10"] == pytest.approx(0.5)
    assert own_metrics(run, qrels, ks=(10,))["MRR@10"] == pytest.approx(0.5)


