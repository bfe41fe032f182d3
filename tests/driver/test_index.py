"""Tests of multiview_plugin/driver/index.py: building an index from shards, and its one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from tests.conftest import one_line_error, poisoned_copy


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
