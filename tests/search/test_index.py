"""Tests of multiview_plugin/search/_index.py: reading an index folder (multiview.json, docid, the Faiss
file) and refusing one that is damaged or edited."""

from __future__ import annotations

import json

import pytest

from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from tests.conftest import one_line_error


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_faiss_index_file_is_one_line(mvr_index, tmp_path, capsys, damage):
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(mvr_index["index"], index)
    data = (index / "index").read_bytes()
    (index / "index").write_bytes({"truncate": data[:len(data) // 2], "garbage": b"not a faiss index" * 8,
                                   "empty": b""}[damage])
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(index), "--encoded_queries", str(mvr_index["qshard"]), "--output",
                        str(run)]) == 2
    one_line_error(capsys, str(index / "index"), "not a readable Faiss index")
    assert index_main(["--report", str(index)]) == 2
    one_line_error(capsys, str(index / "index"))
    assert not run.exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.update(surprise=1), "unknown field 'surprise'"),
    (lambda m: m.pop("dim"), "field 'dim' is missing"),
    (lambda m: m.update(dim="8"), "field 'dim': expected an integer"),
    (lambda m: m.update(num_docs=-1), "field 'num_docs': expected a non-negative"),
    (lambda m: m.update(views_per_doc="many"), "'variable'"),
    (lambda m: m.update(extra=[]), "field 'extra': expected an object"),
    (lambda m: m.update(format_version=99), "newer than this version"),
    (lambda m: m.update(aggregation="median"), "unknown aggregation 'median'"),
    (lambda m: m.update(num_vectors=m["num_vectors"] - 1), "lines, but"),
    (lambda m: m.update(num_docs=m["num_docs"] + 1), "names 8 documents"),
    (None, "expected a JSON object"),
    ("truncate", "not valid JSON"),
])
def test_malformed_multiview_json_is_one_line(mvr_index, tmp_path, capsys, edit, needle):
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(mvr_index["index"], index)
    meta_path = index / "multiview.json"
    if edit == "truncate":
        meta_path.write_text(meta_path.read_text()[:40])
    else:
        meta = json.loads(meta_path.read_text())
        if edit is None:
            meta = [meta]
        else:
            edit(meta)
        meta_path.write_text(json.dumps(meta))
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(index), "--encoded_queries", str(mvr_index["qshard"]), "--output",
                        str(run)]) == 2
    one_line_error(capsys, str(index), needle)
    assert not run.exists()


@pytest.mark.parametrize("change", ["blank_line", "drop_middle_line"])
def test_docid_file_shifted_against_the_index_is_refused(mvr_index, tmp_path, capsys, change):
    """A docid file whose lines no longer match the vectors (one missing in the middle, one added at the end)
    credited vectors to the wrong documents with exit 0."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(mvr_index["index"], index)
    lines = (index / "docid").read_text().splitlines()
    lines = [*lines[:3], "", *lines[3:-1]] if change == "blank_line" else [*lines[:3], *lines[4:], "d99#0"]
    (index / "docid").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(index), "--encoded_queries", str(mvr_index["qshard"]), "--output",
                        str(run)]) == 2
    one_line_error(capsys, str(index / "docid"))
    assert not run.exists()
