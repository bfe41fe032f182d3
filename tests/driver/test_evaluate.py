"""The evaluate driver: ranking metrics and answer accuracy for a run, end to end; its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiview_plugin.driver.evaluate import main as evaluate_main
from multiview_plugin.evaluation.runs import read_run, write_run
from tests.conftest import one_line_error
from tests.strategies import MEDIUM, bounded, qrels_lines, run_driver, run_lines, runs, workdir, write_lines


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


@pytest.fixture
def qrels(tmp_path) -> Path:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return path


@pytest.mark.parametrize("line, fmt", [("q1\td1\tnan", "tevatron"), ("q1\td1\tinf", "tevatron"),
                                       ("q1 Q0 d1 1 NaN t", "trec"), ("q1 Q0 d1 1 -Infinity t", "trec")])
def test_evaluate_refuses_non_finite_scores(tmp_path, qrels, capsys, line, fmt):
    run = tmp_path / "run.txt"
    first = "q2\td2\t1.5" if fmt == "tevatron" else "q2 Q0 d2 1 1.5 t"
    run.write_text(f"{first}\n{line}\n")
    for extra in ([], ["--run_format", fmt]):
        assert evaluate_main(["--run", str(run), "--qrels", str(qrels), *extra]) == 2
        one_line_error(capsys, f"{run} line 2", "finite number")


def test_integer_scored_three_column_run_is_not_read_as_ranks(tmp_path, qrels, capsys):
    """Tevatron-style scores that happen to be integers (3 > 2 > 1: d1 is best) were read as MS MARCO ranks
    (d1 ranked last) with exit 0; now the format must be given, and with it the ranking is right."""
    run = tmp_path / "run.txt"
    run.write_text("q1\td1\t3\nq1\td2\t2\nq1\td3\t1\n")
    assert evaluate_main(["--run", str(run), "--qrels", str(qrels), "--metrics", "MRR@10"]) == 2
    one_line_error(capsys, str(run), "ambiguous", "--run_format")
    out = tmp_path / "m.json"
    assert evaluate_main(["--run", str(run), "--qrels", str(qrels), "--metrics", "MRR@10", "--run_format",
                          "tevatron", "--output_json", str(out)]) == 0
    assert json.loads(out.read_text())["MRR@10"] == pytest.approx(0.5)  # q1: d1 first; q2: nothing retrieved
    assert [d for d, _ in read_run(run, "tevatron")["q1"]] == ["d1", "d2", "d3"]


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# The evaluate driver: MRR@10 equal to a hand computation, or one line.
# Strategies and helpers: tests/strategies.py.


@bounded(MEDIUM)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), pick=st.integers(0, 99),
       kind=st.sampled_from(["none", "none", "nan", "columns", "dup_doc", "cut_line", "qrels_conflict"]))
def test_evaluate_driver_equals_reference_or_one_line(run, fmt, kind, pick):
    """MRR@10 equals a hand computation over the reference ranking, or exit 2 with one line naming the file."""
    qrels = {q: {d: 1 for j, (d, _) in enumerate(r) if (j + pick) % 3 == 0} or {"unretrieved": 1}
             for q, r in run.items()}
    qrels["never_run"] = {"x": 1}
    lines = run_lines(run, fmt)
    i = pick % len(lines)
    if kind == "nan" and fmt != "msmarco":
        parts = lines[i].split()
        parts[4 if fmt == "trec" else 2] = "nan"
        lines[i] = (" " if fmt == "trec" else "\t").join(parts)
    elif kind == "columns":
        lines[i] = lines[i].rsplit(" " if fmt == "trec" else "\t", 1)[0]
    elif kind == "dup_doc":
        lines.append(lines[i])
    elif kind == "cut_line":
        lines[i] = lines[i][:max(1, len(lines[i]) // 3)]
    qrel_lines = qrels_lines(qrels, "trec")
    if kind == "qrels_conflict":
        qrel_lines.append(qrel_lines[0][:-1] + "0")
    with workdir() as tmp:
        path = write_lines(tmp / "run.txt", lines)
        qpath = write_lines(tmp / "qrels.txt", qrel_lines)
        out = tmp / "m.json"
        rc, err = run_driver(evaluate_main, ["--run", str(path), "--qrels", str(qpath), "--metrics", "MRR@10",
                                             "--run_format", fmt, "--output_json", str(out)])
        if rc:
            assert str(qpath if kind == "qrels_conflict" else path) in err, err
            assert kind not in ("none",) and not (kind == "nan" and fmt == "msmarco"), err
            return
        assert kind == "none" or (kind == "nan" and fmt == "msmarco"), kind
        expected = sum(next((1 / r for r, (d, _) in enumerate(ranking[:10], 1) if d in qrels[q]), 0.0)
                       for q, ranking in run.items()) / len(qrels)
        assert json.loads(out.read_text())["MRR@10"] == pytest.approx(expected, abs=1e-12)
