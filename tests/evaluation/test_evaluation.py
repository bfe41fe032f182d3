"""Evaluation: run files, ranking metrics (ir_measures vs our numpy cross-check), DPR answer accuracy, CLI."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest

from multiview_plugin.data.readers import InputFormatError, load_qrels
from multiview_plugin.driver.evaluate import main as evaluate_main
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.evaluation import (
    build_retrieval,
    evaluate_run,
    has_answer,
    load_answers,
    load_qa,
    normalize_answer,
    own_metrics,
    read_run,
    retrieval_accuracy,
    topk_accuracy,
    write_retrieval_json,
    write_run,
)


def shared_data_dir() -> Path | None:
    """``../shared/data`` beside the checkout (or $MULTIVIEW_SHARED_DATA), if present."""
    candidates = [Path(os.environ["MULTIVIEW_SHARED_DATA"])] if os.environ.get("MULTIVIEW_SHARED_DATA") else []
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "data")
    return next((c for c in candidates if c.is_dir()), None)


def sample_run() -> dict[str, list[tuple[str, float]]]:
    return {
        "q1": [("d3", 12.5), ("d1", 11.0), ("d7", 3.25)],
        "q2": [("a", -0.5), ("b", -1.0000004), ("c", -2.0)],
        "q3": [("x", 1.0)],
    }


# ----------------------------------------------------------------------------- run files


@pytest.mark.parametrize("fmt", ["trec", "msmarco", "tevatron"])
def test_run_round_trip(tmp_path, fmt):
    run = sample_run()
    path = write_run(run, tmp_path / "sub" / f"run.{fmt}", fmt=fmt, tag="test")
    assert path.is_file() and not list(path.parent.glob(".*.tmp"))
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not a private temp-file mode
    for detected in (None, fmt):
        back = read_run(path, fmt=detected)
        assert list(back) == list(run)
        for qid, ranking in run.items():
            assert [d for d, _ in back[qid]] == [d for d, _ in ranking]
            if fmt == "msmarco":
                assert [s for _, s in back[qid]] == [1 / r for r in range(1, len(ranking) + 1)]
            else:
                assert [s for _, s in back[qid]] == pytest.approx([s for _, s in ranking], abs=1e-6)


def test_trec_line_format_and_sorting(tmp_path):
    path = write_run({"q1": [("d1", 2.0), ("d2", 1.5)]}, tmp_path / "run.trec", tag="mv")
    assert path.read_text().splitlines() == ["q1 Q0 d1 1 2.000000 mv", "q1 Q0 d2 2 1.500000 mv"]
    # lines out of order are sorted by score; ties keep the rank column
    shuffled = tmp_path / "shuffled.trec"
    shuffled.write_text("q1 Q0 c 3 1.0 t\nq1 Q0 a 1 5.0 t\nq1 Q0 b 2 1.0 t\n")
    assert [d for d, _ in read_run(shuffled)["q1"]] == ["a", "b", "c"]


def test_malformed_run_line(tmp_path):
    path = tmp_path / "bad.trec"
    path.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 notanumber t\n")
    with pytest.raises(InputFormatError) as err:
        read_run(path)
    assert err.value.line == 2 and "bad.trec line 2" in str(err.value) and "score" in str(err.value)
    path.write_text("q1 Q0 d1 1 2.0 t\nq1 d2 2.0\n")
    with pytest.raises(InputFormatError, match="bad.trec line 2: expected 6 columns"):
        read_run(path)
    path.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d1 2 1.0 t\n")
    with pytest.raises(InputFormatError, match="line 2: docid 'd1' is listed twice .*first on line 1"):
        read_run(path)


def test_write_run_rejects_whitespace(tmp_path):
    with pytest.raises(ConfigError, match="docid"):
        write_run({"q1": [("d 1", 1.0)]}, tmp_path / "run.trec")
    assert not (tmp_path / "run.trec").exists() and not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------- ranking metrics


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


# ----------------------------------------------------------------------------- answers


def test_normalize_answer():
    assert normalize_answer("  The Eiffel   Tower! ") == "eiffel tower"
    assert normalize_answer("an Apple, a day.") == "apple day"


def test_has_answer_tokens():
    assert has_answer(["eiffel tower"], "The Eiffel Tower! was built in 1889.")
    assert has_answer(["nothing", "EIFFEL Tower"], "the eiffel tower")
    assert not has_answer(["art"], "They had a party.")
    assert has_answer(["art"], "Modern art, mostly.")
    assert not has_answer(["eiffel tower"], "the tower of eiffel")
    assert has_answer(["May 18 , 2018"], "released on May 18, 2018 worldwide")
    assert not has_answer([""], "anything")
    assert not has_answer([], "anything")
    # unicode: NFC vs NFD spellings match each other, accents are not dropped
    assert has_answer(["Wilhelm Conrad Röntgen"], "won by Wilhelm Conrad Ro\u0308ntgen in 1901")
    assert not has_answer(["Rontgen"], "Wilhelm Röntgen")
    assert has_answer(["東京"], "首都は 東京 です")
    # DPR keeps articles and punctuation; the lenient mode drops them
    assert not has_answer(["the U.S. army"], "a US army unit")
    assert has_answer(["the U.S. army"], "a U S army unit", lenient=True)


def test_has_answer_regex():
    pattern = r"20\s?,?\s?(32|40)0\s?-?\s?f(ee|oo)t|6,194-meter"
    assert has_answer([pattern], "Mount McKinley is 20,320 FEET high", regex=True)
    assert has_answer(["nope", pattern], "a 6,194-meter peak", regex=True)
    assert not has_answer([pattern], "it is 19,000 feet", regex=True)
    assert not has_answer(["(unclosed"], "(unclosed", regex=True)  # invalid regex: no match, no error
    assert has_answer(["^second line"], "first\nsecond line", regex=True)  # multiline


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


def test_load_answers(tmp_path):
    jsonl = tmp_path / "eval_answers.jsonl"
    jsonl.write_text('{"query_id": "56be4db0", "answers": ["Denver Broncos"]}\n{"query_id": 7, "answers": "x"}\n')
    assert load_answers(jsonl) == {"56be4db0": ["Denver Broncos"], "7": ["x"]}
    dpr = tmp_path / "topics.dpr.test.txt"
    dpr.write_text("who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\n"
                   "which mode is used\t['Olivia', 'MFSK']\n", encoding="utf-8")
    questions, answers = load_qa(dpr)
    assert questions == {"0": "who got the first nobel prize in physics", "1": "which mode is used"}
    assert answers == {"0": ["Wilhelm Conrad Röntgen"], "1": ["Olivia", "MFSK"]}
    curated = tmp_path / "curated.txt"
    curated.write_text('{"question": "How tall?", "answer": ["20,?320 feet"]}\n')
    assert load_qa(curated) == ({"0": "How tall?"}, {"0": ["20,?320 feet"]})
    jsonl.write_text('{"query_id": "a", "answers": [1]}\n')
    with pytest.raises(InputFormatError, match="line 1: field 'answers'"):
        load_answers(jsonl)


def test_load_real_dpr_topics():
    data = shared_data_dir()
    path = data / "anserini" / "topics" / "topics.dpr.curated.test.txt" if data else None
    if path is None or not path.is_file():
        pytest.skip("shared data not available")
    questions, answers = load_qa(path)
    assert list(questions)[:2] == ["0", "1"] and questions["0"] == "How tall is Mount McKinley?"
    assert has_answer(answers["0"], "Denali rises 20,320 feet above sea level", regex=True)


# ----------------------------------------------------------------------------- CLI


def test_cli_end_to_end(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in [
        {"docid": "p1", "title": "Eiffel", "text": "Gustave Eiffel built the tower."},
        {"docid": "p2", "title": "Paris", "text": "Paris is in France."},
        {"docid": "p3", "title": "Rome", "text": "Rome is in Italy."},
    ]))
    answers = tmp_path / "eval_answers.jsonl"
    answers.write_text('{"query_id": "q1", "answers": ["Gustave Eiffel"]}\n{"query_id": "q2", "answers": ["Italy"]}\n')
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1 0 p1 1\nq2 0 p3 1\n")
    run = write_run({"q1": [("p1", 2.0), ("p2", 1.0)], "q2": [("p2", 2.0), ("p3", 1.0)]}, tmp_path / "run.trec")
    out_json = tmp_path / "metrics" / "m.json"
    retrieval = tmp_path / "retrieval.json"
    rc = evaluate_main(["--run", str(run), "--qrels", str(qrels), "--metrics", "MRR@10", "R@1",
                        "--answers", str(answers), "--corpus", str(corpus), "--topk", "1", "2",
                        "--save_retrieval", str(retrieval), "--output_json", str(out_json)])
    assert rc == 0
    table = capsys.readouterr().out.splitlines()
    # every printed value in percent (issue 31: ranking metrics were printed as fractions beside percentages)
    assert table[0].split() == ["metric", "value", "(%)"]
    assert [line.split() for line in table[2:]] == [["MRR@10", "75.00"], ["R@1", "50.00"],
                                                    ["Top1", "50.00"], ["Top2", "100.00"]]
    assert json.loads(out_json.read_text()) == pytest.approx({"MRR@10": 0.75, "R@1": 0.5, "Top1": 50.0,
                                                              "Top2": 100.0})
    saved = json.loads(retrieval.read_text())
    assert saved["q1"]["contexts"][0]["text"] == "Eiffel\nGustave Eiffel built the tower."


def test_cli_errors(tmp_path, capsys):
    assert evaluate_main(["--run", str(tmp_path / "missing.trec"), "--qrels", str(tmp_path / "q.txt")]) == 2
    assert "error: --run: no such file" in capsys.readouterr().err
    run = write_run({"q1": [("p1", 1.0)]}, tmp_path / "run.trec")
    assert evaluate_main(["--run", str(run)]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err
    answers = tmp_path / "a.jsonl"
    answers.write_text('{"query_id": "q1", "answers": ["x"]}\n')
    assert evaluate_main(["--run", str(run), "--answers", str(answers)]) == 2
    assert "--answers needs --corpus" in capsys.readouterr().err
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 p1 1 1.0 t\nq1 Q0 p2\n")
    qrels = tmp_path / "q.txt"
    qrels.write_text("q1 0 p1 1\n")
    assert evaluate_main(["--run", str(bad), "--qrels", str(qrels)]) == 2
    assert "bad.trec line 2" in capsys.readouterr().err
    # run queries absent from the qrels: a warning and zeros, not an error
    other = tmp_path / "other.txt"
    other.write_text("zz 0 p1 1\n")
    assert evaluate_main(["--run", str(run), "--qrels", str(other), "--metrics", "MRR@10"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split() == ["MRR@10", "0.00"]
