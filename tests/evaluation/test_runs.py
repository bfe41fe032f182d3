"""Run files (evaluation/runs.py): TREC, Tevatron and MS MARCO round trips, line format, malformed lines."""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from multiview_plugin.data.readers import InputFormatError
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.evaluation.runs import detect_run_format, read_run, write_run
from tests.strategies import (
    DAMAGE,
    FAST,
    bounded,
    damage,
    nonblank_text_lines,
    one_line,
    run_lines,
    runs,
    workdir,
    write_lines,
)


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


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Runs (trec, msmarco, tevatron): equal to a reference, one line, or no line lost.
# Strategies and helpers: tests/strategies.py.


def same_ranking(read, run, fmt: str, shuffled: bool) -> None:
    """Equal to the reference: docids in order (scores 1/rank for msmarco); lines shuffled in a tevatron file
    may reorder documents of equal score among themselves (the file has nothing else to order them by)."""
    assert (set(read) == set(run)) if shuffled else (list(read) == list(run))
    for q, ranking in run.items():
        got = read[q]
        if fmt == "msmarco":
            assert got == [(d, 1 / r) for r, (d, _) in enumerate(ranking, 1)]
        elif fmt == "trec" or not shuffled:
            assert got == ranking
        else:
            assert [s for _, s in got] == [s for _, s in ranking] and sorted(got) == sorted(ranking)


@bounded(FAST)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), shuffle=st.randoms(use_true_random=False),
       gz=st.booleans(), crlf=st.booleans(), given_format=st.booleans(), blank=st.frozensets(st.integers(1, 9),
                                                                                           max_size=2))
def test_runs_well_formed_equal_reference(run, fmt, shuffle, gz, crlf, given_format, blank):
    lines = run_lines(run, fmt)
    shuffled = fmt != "msmarco"
    if shuffled:
        shuffle.shuffle(lines)  # scores, not line order, rank
    with workdir() as tmp:
        path = write_lines(tmp / f"run.{fmt}{'.gz' if gz else ''}", lines, gz=gz, crlf=crlf, blank=blank)
        same_ranking(read_run(path, fmt if given_format else None), run, fmt, shuffled)


@bounded(FAST)
@given(run=runs(integer_scores=True))
def test_integer_scored_runs_are_never_read_as_ranks(run):
    """A best-first run with integer scores is refused as ambiguous (it needs --run_format), or read as MS MARCO
    ranks only where both readings agree (one document per query, valued 1): never in reverse."""
    with workdir() as tmp:
        path = write_lines(tmp / "run.txt", run_lines(run, "tevatron_int"))
        try:
            read = read_run(path)
        except InputFormatError as err:
            one_line(err, path)
            assert "--run_format" in str(err)
            return
        assert all(len(r) == 1 and r[0][1] == 1 for r in run.values())
        assert {q: [d for d, _ in r] for q, r in read.items()} == {q: [d for d, _ in r] for q, r in run.items()}


RUN_BREAKS = ["nan", "inf", "word", "columns", "dup_doc", "neg_rank", "bad_utf8"]


@bounded(FAST)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), kind=st.sampled_from(RUN_BREAKS),
       pick=st.integers(0, 100), given_format=st.booleans())
def test_runs_malformed_is_one_line_at_its_line(run, fmt, kind, pick, given_format):
    assume(not (kind in ("nan", "inf") and fmt == "msmarco"))
    assume(not (kind == "neg_rank" and fmt == "tevatron"))
    lines = run_lines(run, fmt)
    i = pick % len(lines)
    sep = " " if fmt == "trec" else "\t"
    parts = lines[i].split(sep)
    value = 4 if fmt == "trec" else 2
    if kind in ("nan", "inf", "word"):
        parts[value] = {"nan": "nan", "inf": "-inf", "word": "high"}[kind]
    elif kind == "neg_rank":
        parts[3 if fmt == "trec" else 2] = "-1" if fmt == "trec" else "0"
    elif kind == "columns":
        parts = parts[:-1]
    if kind == "dup_doc":
        lines.append(lines[i])
        i = len(lines) - 1
    else:
        lines[i] = sep.join(parts)
    with workdir() as tmp:
        path = write_lines(tmp / f"run.{fmt}", lines)
        if kind == "bad_utf8":
            data = path.read_bytes().split(b"\n")
            data[i] = b"\xff" + data[i]
            path.write_bytes(b"\n".join(data))
        with pytest.raises(InputFormatError) as err:
            read_run(path, fmt if given_format else None)
        one_line(err.value, path, None if kind == "bad_utf8" and not given_format else i + 1)


@bounded(FAST)
@given(run=runs(), fmt=st.sampled_from(["trec", "tevatron", "msmarco"]), hit=DAMAGE, given_format=st.booleans())
def test_runs_damaged_never_traceback_never_lose_lines(run, fmt, hit, given_format):
    with workdir() as tmp:
        path = write_lines(tmp / f"run.{fmt}", run_lines(run, fmt))
        data = damage(path.read_bytes(), *hit)
        path.write_bytes(data)
        try:
            read = read_run(path, fmt if given_format else None)
        except (InputFormatError, MultiViewError) as err:
            one_line(err, path)
            return
        assert sum(map(len, read.values())) == len(nonblank_text_lines(data))
