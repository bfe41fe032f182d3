"""Tests of multiview_plugin/driver/index.py: building an index from shards, and its one-line errors."""

from __future__ import annotations

import pickle

import faiss
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from tests.conftest import one_line_error, poisoned_copy
from tests.strategies import PER_KIND, bounded, run_driver, shard_payloads, workdir


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_index_and_search_refuse_non_finite_shard_rows(mvr_index, tmp_path, capsys, value):
    bad = tmp_path / "c.pkl"
    row_id = poisoned_copy(mvr_index["shard"], bad, row=5, value=value)
    assert index_main(["--passage_reps", str(bad), "--index_dir", str(tmp_path / "idx")]) == 2
    one_line_error(capsys, str(bad), "row 5", repr(row_id), "NaN or infinite")
    assert not (tmp_path / "idx").exists()
    run = tmp_path / "run.txt"
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(mvr_index["qshard"]), "--passage_reps", str(bad),
                            "--save_ranking_to", str(run), "--save_text", "--depth", "3", *extra]) == 2
        one_line_error(capsys, str(bad), repr(row_id))
    assert not run.exists()


@pytest.mark.parametrize("factory, needle", [
    ("NotAFactory", "could not parse index string"),
    ("IVF4096,Flat", "Number of training points"),
    ("PQ5", "multiple of the number of subquantizers"),
])
def test_bad_index_factory_is_one_line(mvr_index, tmp_path, capsys, factory, needle):
    out = tmp_path / "idx"
    assert index_main(["--passage_reps", str(mvr_index["shard"]), "--index_dir", str(out),
                       "--index_factory", factory]) == 2
    one_line_error(capsys, "--index_factory", repr(factory), needle)
    assert not out.exists() and not list(tmp_path.glob(".idx.*"))


def test_bad_doc_index_factory_is_one_line(mvr_index, tmp_path, capsys):
    assert index_main(["--passage_reps", str(mvr_index["shard"]), "--index_dir", str(tmp_path / "idx"),
                       "--doc_index_factory", "HNSWxyz"]) == 2
    one_line_error(capsys, "--doc_index_factory", "'HNSWxyz'")


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# The index driver over generated and damaged shards.
# Strategies and helpers: tests/strategies.py.


def _lookup_variant(ids: list[str], variant: str):
    if variant == "tuple":
        return tuple(ids)
    if variant == "array":
        return np.array(ids)
    return list(ids)


SHARD_BREAKS = {
    "nan": lambda reps, lk: (_set(reps, np.nan), lk),
    "inf": lambda reps, lk: (_set(reps, -np.inf), lk),
    "short_lookup": lambda reps, lk: (reps, lk[:-1]),
    "long_lookup": lambda reps, lk: (reps, [*lk, "extra"]),
    "none_id": lambda reps, lk: (reps, [None, *lk[1:]]),
    "float_id": lambda reps, lk: (reps, [1.5, *lk[1:]]),
    "bytes_id": lambda reps, lk: (reps, [b"x", *lk[1:]]),
    "list_id": lambda reps, lk: (reps, [["a", "b"], *lk[1:]]),
    "bool_id": lambda reps, lk: (reps, [True, *lk[1:]]),
    "newline_id": lambda reps, lk: (reps, ["a\nb", *lk[1:]]),
    "space_id": lambda reps, lk: (reps, ["a b", *lk[1:]]),
    "empty_id": lambda reps, lk: (reps, ["", *lk[1:]]),
    "dup_id": lambda reps, lk: (reps, [lk[-1], *lk[1:]]) if len(lk) > 1 else (reps, lk + lk),
    "int_vectors": lambda reps, lk: (reps.astype(np.int32), lk),
    "one_d": lambda reps, lk: (reps.reshape(-1), lk),
    "lookup_dict": lambda reps, lk: (reps, dict.fromkeys(lk)),
}


def _set(reps: np.ndarray, value: float) -> np.ndarray:
    reps = reps.copy()
    reps.flat[len(reps.flat) // 2] = value
    return reps


@pytest.mark.parametrize("kind", ["none", "garbage_after", "truncate", "not_tuple", "triple", *SHARD_BREAKS])
@bounded(PER_KIND)
@given(payload=shard_payloads(), variant=st.sampled_from(["list", "tuple", "array"]), cut=st.integers(0, 10_000),
       protocol=st.sampled_from([2, 4, 5]))
def test_index_driver_over_shards_equals_reference_or_one_line(payload, variant, kind, cut, protocol):
    reps, ids = payload
    with workdir() as tmp:
        shard = tmp / "shard.pkl"
        obj = (reps, _lookup_variant(ids, variant))
        if kind in SHARD_BREAKS:
            obj = SHARD_BREAKS[kind](reps, list(ids))
        elif kind == "not_tuple":
            obj = [reps, ids]
        elif kind == "triple":
            obj = (reps, ids, ids)
        data = pickle.dumps(obj, protocol=protocol)
        if kind == "truncate":
            data = data[:cut % len(data)]
        elif kind == "garbage_after":
            data += b"trailing bytes"
        shard.write_bytes(data)
        rc, err = run_driver(index_main, ["--passage_reps", str(shard), "--index_dir", str(tmp / "idx"),
                                          "--allow_partial"])
        if rc:
            assert str(shard) in err
            assert kind not in ("none", "garbage_after"), err
            assert not (tmp / "idx").exists()
            return
        assert kind in ("none", "garbage_after"), kind
        assert (tmp / "idx" / "docid").read_text().splitlines() == ids
        index = faiss.read_index(str(tmp / "idx" / "index"))
        np.testing.assert_array_equal(index.reconstruct_n(0, index.ntotal), reps.astype(np.float32))
