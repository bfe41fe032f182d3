"""Run files (evaluation/runs.py): TREC, Tevatron and MS MARCO round trips, line format, malformed lines."""

from __future__ import annotations

import os

import pytest

from multiview_plugin.data.readers import InputFormatError
from multiview_plugin.errors import ConfigError
from multiview_plugin.evaluation.runs import detect_run_format, read_run, write_run


def sample_run() -> dict[str, list[tuple[str, float]]]:
    return {
        "q1": [("d3", 12.5), ("d1", 11.0), ("d7", 3.25)],
        "q2": [("a", -0.5), ("b", -1.0000004), ("c", -2.0)],
        "q3": [("x", 1.0)],
    }


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


@pytest.mark.parametrize("text, fmt", [
    ("q1\td1\t1\nq1\td2\t2\nq2\td2\t1\n", "msmarco"),          # ranks 1..n per query: MS MARCO
    ("q1\td1\t2.5\nq1\td2\t2\nq2\td2\t1\n", "tevatron"),        # one non-integer: scores
    ("q1 Q0 d1 1 2 t\n", "trec"),
])
def test_run_format_detected_only_when_unambiguous(tmp_path, text, fmt):
    run = tmp_path / "run.txt"
    run.write_text(text)
    assert detect_run_format(run) == fmt
    assert read_run(run) == read_run(run, fmt)


@pytest.mark.parametrize("text", ["q1\td1\t2\nq1\td2\t1\n", "q1\td1\t1\nq1\td2\t1\n", "q1\td1\t1\nq1\td2\t3\n",
                                  "q1\td1\t5\n"])
def test_ambiguous_integer_runs_need_run_format(tmp_path, text):
    run = tmp_path / "run.txt"
    run.write_text(text)
    with pytest.raises(InputFormatError, match="ambiguous run format.*--run_format"):
        read_run(run)


def test_run_errors_are_located_not_tracebacks(tmp_path):
    run = tmp_path / "run.txt"
    run.write_text("q1\td1\t1.5\nq1\td2\thigh\n")  # was an IndexError traceback
    with pytest.raises(InputFormatError, match=r"run.txt line 2: field 'score'"):
        read_run(run, "tevatron")
    run.write_bytes(b"q1\td1\t1.5\nq1\td2\t\xff1.0\n")  # bad UTF-8: now with its line
    with pytest.raises(InputFormatError, match=r"run.txt line 2: not valid UTF-8"):
        read_run(run, "tevatron")
