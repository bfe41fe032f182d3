"""Shared hypothesis strategies and helpers of the property-based tests, which live in the test file of the module
each one checks (``tests/data/test_readers.py``, ``tests/evaluation/test_runs.py``, ``tests/driver/test_*.py``, ...).

For generated inputs, each reader / driver either

* produces output equal to a reference (the data the file was generated from), for well-formed files and for
  transformations that keep their meaning (blank lines, CRLF, BOM, gzip, key order, extra fields, ...), or
* refuses with one line naming the file (and the line, for line-based files) for malformed ones, or
* for arbitrary byte-level damage (truncation, a deleted / inserted / flipped byte, a duplicated line), does
  one of the two: never a traceback, and never a result that silently drops a line of the file.

Drivers are called in-process through their ``main(argv)`` (the ``cli`` wrapper: exit status 2 and one
``error: ...`` line). Examples are bounded and derandomized (``bounded``) so the tests are reproducible and
fast; docs/reliability.md states the number of generated cases.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tools.testing import WORDS

# generated cases stated in docs/reliability.md.
FAST, MEDIUM, SLOW, PER_KIND = 60, 30, 12, 3


def bounded(n: int) -> Callable:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# ----------------------------------------------------------------------------- strategies

ID = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.:", min_size=1, max_size=6)
RICH = ["é", "naïve", "日本", "ß", '"q"', "back\\slash", "a/b", "x{y}", "emoji\U0001F600", "zwj\u200dx"]
TEXT = st.lists(st.sampled_from(list(WORDS[:40]) + RICH), min_size=1, max_size=6).map(" ".join)
PLAIN = st.lists(st.sampled_from(list(WORDS[:40])), min_size=1, max_size=5).map(" ".join)


def unique_ids(n_min: int = 1, n_max: int = 6) -> st.SearchStrategy[list[str]]:
    return st.lists(ID, min_size=n_min, max_size=n_max, unique=True)


def write_lines(path: Path, lines: list[str], *, crlf: bool = False, bom: bool = False, blank: frozenset = frozenset(),
                gz: bool = False) -> Path:
    """Write ``lines`` (blank lines inserted before the indices in ``blank``)."""
    out: list[str] = []
    for i, line in enumerate(lines):
        if i in blank:
            out.append("   " if i % 2 else "")
        out.append(line)
    data = (("\ufeff" if bom else "") + "".join(x + ("\r\n" if crlf else "\n") for x in out)).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def damage(data: bytes, kind: str, at: int, byte: int) -> bytes:
    """Byte-level damage at position ``at`` (taken modulo the length)."""
    if not data:
        return data
    at %= len(data)
    if kind == "truncate":
        return data[:at]
    if kind == "delete":
        return data[:at] + data[at + 1:]
    if kind == "insert":
        return data[:at] + bytes([byte]) + data[at:]
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:]
    lines = data.splitlines(keepends=True)  # duplicate a line
    i = at % len(lines)
    return b"".join(lines[:i + 1] + [lines[i] if lines[i].endswith(b"\n") else lines[i] + b"\n"] + lines[i + 1:])


DAMAGE = st.tuples(st.sampled_from(["truncate", "delete", "insert", "flip", "duplicate"]),
                   st.integers(0, 10_000), st.integers(0, 255))


def one_line(err: BaseException, path: Path, line: int | None = None) -> None:
    """The error is one line naming ``path`` (and ``line``)."""
    text = str(err)
    assert "\n" not in text and str(path) in text, text
    if line is not None:
        assert f"line {line}" in text, (line, text)


def nonblank_lines(data: bytes) -> list[bytes]:
    """The lines a line reader sees as non-blank (split at b"\\n", blank = only whitespace)."""
    return [x for x in data.split(b"\n") if x.decode("utf-8", "replace").strip()]


def nonblank_text_lines(data: bytes) -> list[str]:
    """The same for readers of text streams (universal newlines: a lone \\r also ends a line)."""
    return [x for x in io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="replace") if x.split()]


@contextlib.contextmanager
def workdir():
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def run_driver(main: Callable, argv: list[str]) -> tuple[int, str]:
    """(exit status, the ``error: ...`` line or '') of a driver run in-process; a traceback fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    lines = [x[x.index("error: "):] for x in err.getvalue().splitlines() if "error: " in x]  # after a tqdm bar
    assert "Traceback" not in err.getvalue()
    if rc:
        assert rc == 2 and len(lines) == 1, err.getvalue()
    return rc, lines[0] if lines else ""


@st.composite
def corpora(draw) -> list[tuple[str, str | None, str]]:
    ids = draw(unique_ids())
    return [(d, draw(st.one_of(st.none(), TEXT)), draw(TEXT)) for d in ids]


def corpus_lines(docs, fmt: str, *, alt_keys: bool = False, extra: bool = False, shuffle_keys: bool = False,
                 int_ids: bool = False) -> list[str]:
    if fmt == "tsv":
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter="\t", lineterminator="\n")
        writer.writerow(["id", "text", "title"])
        for d, title, text in docs:
            writer.writerow([d, text, title or ""])
        return buf.getvalue().splitlines()
    lines = []
    for d, title, text in docs:
        obj = {"_id" if alt_keys else "docid": int(d) if int_ids and d.isdigit() and d == str(int(d)) else d,
               "document_text" if alt_keys else "text": text}
        if title is not None:
            obj["title"] = title
        if extra:
            obj["metadata"] = {"url": "http://x", "n": [1, 2.5, None]}
        items = list(obj.items())[::-1] if shuffle_keys else list(obj.items())
        lines.append(json.dumps(dict(items), ensure_ascii=bool(len(lines) % 2)))
    return lines


def qrels_lines(qrels, fmt: str) -> list[str]:
    rows = [(q, d, r) for q, docs in qrels.items() for d, r in docs.items()]
    if fmt == "trec":
        return [f"{q} 0 {d} {r}" for q, d, r in rows]
    return ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{r}" for q, d, r in rows)]


@st.composite
def runs(draw, integer_scores: bool = False) -> dict[str, list[tuple[str, float]]]:
    run = {}
    for q in draw(unique_ids(1, 4)):
        docs = draw(unique_ids(1, 5))
        score = st.integers(-50, 50).map(float) if integer_scores else st.floats(-100, 100, allow_nan=False).map(
            lambda x: round(x, 3))
        scores = sorted((draw(score) for _ in docs), reverse=True)
        run[q] = list(zip(docs, scores))
    return run


def run_lines(run, fmt: str) -> list[str]:
    out = []
    for q, ranking in run.items():
        for rank, (d, s) in enumerate(ranking, 1):
            out.append({"trec": f"{q} Q0 {d} {rank} {s:.6f} tag", "tevatron": f"{q}\t{d}\t{s:.6f}",
                        "msmarco": f"{q}\t{d}\t{rank}", "tevatron_int": f"{q}\t{d}\t{int(s)}"}[fmt])
    return out


@st.composite
def shard_payloads(draw) -> tuple[np.ndarray, list[str]]:
    ids = draw(unique_ids(1, 6))
    dim = draw(st.integers(1, 6))
    dtype = draw(st.sampled_from([np.float32, np.float16]))
    values = draw(st.lists(st.floats(-4, 4, allow_nan=False, width=16), min_size=len(ids) * dim,
                           max_size=len(ids) * dim))
    return np.array(values, dtype=dtype).reshape(len(ids), dim), ids


def build_index_folder(root: Path) -> dict[str, Path]:
    """A small index (12 documents × 2 views, dim 8) and query vectors; the reference run."""
    from multiview_plugin.driver.index import main as index_main
    from multiview_plugin.driver.search import main as search_main

    rng = np.random.default_rng(0)
    reps = rng.standard_normal((24, 8)).astype(np.float32)
    lookup = [f"d{i // 2}#{i % 2}" for i in range(24)]
    (root / "c.pkl").write_bytes(pickle.dumps((reps, lookup), protocol=5))
    info = {"model_name": "mvr", "dim": 8, "views_per_doc": 2, "dtype": "float32", "num_items": 12,
            "num_vectors": 24, "max_views": 2, "view_ids": True}
    (root / "c.pkl.json").write_text(json.dumps(info))
    (root / "q.pkl").write_bytes(pickle.dumps((rng.standard_normal((5, 8)).astype(np.float32),
                                               [f"q{i}" for i in range(5)]), protocol=5))
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx")]) == 0
    assert search_main(["--index", str(root / "idx"), "--encoded_queries", str(root / "q.pkl"), "--output",
                        str(root / "ref.trec"), "--hits", "5"]) == 0
    return {"root": root, "index": root / "idx", "queries": root / "q.pkl", "reference": root / "ref.trec"}
