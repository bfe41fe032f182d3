"""Tests of multiview_plugin/index/meta.py (and the searchers over it): reading an index folder (multiview.json,
docid, the Faiss file) and refusing one that is damaged or edited."""

from __future__ import annotations

import json
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.evaluation.runs import read_run
from tests.conftest import one_line_error
from tests.strategies import PER_KIND, bounded, build_index_folder, run_driver, workdir


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


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Damaged or edited index folders and re-scoring stores.
# Strategies and helpers: tests/strategies.py.


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory) -> dict[str, Path]:
    """A small index (12 documents × 2 views, dim 8) and query vectors; the reference run."""
    return build_index_folder(tmp_path_factory.mktemp("props_index"))


def _meta_edit(field: str, value) -> Callable[[dict], None]:
    return lambda meta: meta.__setitem__(field, value)


META_EDITS = {
    "unknown_field": _meta_edit("surprise", 1),
    "dim_string": _meta_edit("dim", "8"),
    "dim_wrong": _meta_edit("dim", 9),
    "num_vectors_wrong": _meta_edit("num_vectors", 23),
    "num_docs_negative": _meta_edit("num_docs", -1),
    "views_word": _meta_edit("views_per_doc", "many"),
    "mean_views_string": _meta_edit("mean_views", "2"),
    "aggregation_unknown": _meta_edit("aggregation", "median"),
    "extra_not_dict": _meta_edit("extra", []),
    "view_ids_string": _meta_edit("view_ids", "yes"),
    "shards_not_list": _meta_edit("shards", "c.pkl"),
    "newer_format": _meta_edit("format_version", 99),
    "missing_dim": lambda meta: meta.pop("dim"),
    "not_object": None,
    "extra_harmless": lambda meta: meta["extra"].__setitem__("note", "added by hand"),
}
FOLDER_DAMAGE = ["delete_index", "delete_docid", "delete_meta", "docid_short", "docid_long", "docid_blank",
                 "index_truncated", "index_garbage", "meta_truncated", *(f"meta:{k}" for k in META_EDITS)]


@pytest.mark.parametrize("kind", FOLDER_DAMAGE)
@bounded(PER_KIND)
@given(cut=st.integers(1, 10_000))
def test_search_driver_over_index_folders_equals_reference_or_one_line(index_folder, kind, cut):
    with workdir() as tmp:
        idx = tmp / "idx"
        shutil.copytree(index_folder["index"], idx)
        meta_path, docid, index = idx / "multiview.json", idx / "docid", idx / "index"
        if kind.startswith("delete_"):
            {"delete_index": index, "delete_docid": docid, "delete_meta": meta_path}[kind].unlink()
        elif kind.startswith("docid_"):
            lines = docid.read_text().splitlines()
            lines = {"docid_short": lines[:-1], "docid_long": [*lines, "d99#0"],
                     "docid_blank": [*lines[:3], "", *lines[3:-1]]}[kind]
            docid.write_text("\n".join(lines) + "\n")
        elif kind.startswith("index_"):
            data = index.read_bytes()
            index.write_bytes(data[:cut % len(data)] if kind == "index_truncated" else b"\x00garbage" * 9)
        elif kind == "meta_truncated":
            text = meta_path.read_text()
            meta_path.write_text(text[:cut % len(text)])
        else:
            edit = META_EDITS[kind.split(":", 1)[1]]
            meta = json.loads(meta_path.read_text())
            if edit is None:
                meta = [meta]
            else:
                edit(meta)
            meta_path.write_text(json.dumps(meta))
        out = tmp / "run.trec"
        rc, err = run_driver(search_main, ["--index", str(idx), "--encoded_queries", str(index_folder["queries"]),
                                           "--output", str(out), "--hits", "5"])
        if rc:
            assert str(idx) in err, err
            assert kind != "meta:extra_harmless", err
            assert not out.exists()
            return
        assert kind == "meta:extra_harmless", kind
        assert read_run(out) == read_run(index_folder["reference"])


@pytest.fixture(scope="module")
def store_folder(tmp_path_factory) -> dict[str, Path]:
    """An SQ8 index with an fp32 re-scoring store (24 documents × 2 views, dim 8), queries, the reference run."""
    root = tmp_path_factory.mktemp("props_store")
    rng = np.random.default_rng(1)
    reps = rng.standard_normal((48, 8)).astype(np.float32)
    (root / "c.pkl").write_bytes(pickle.dumps((reps, [f"d{i // 2}#{i % 2}" for i in range(48)]), protocol=5))
    (root / "c.pkl.json").write_text(json.dumps({"model_name": "mvr", "dim": 8, "views_per_doc": 2,
                                                 "dtype": "float32", "num_items": 24, "num_vectors": 48,
                                                 "max_views": 2, "view_ids": True}))
    (root / "q.pkl").write_bytes(pickle.dumps((rng.standard_normal((5, 8)).astype(np.float32),
                                               [f"q{i}" for i in range(5)]), protocol=5))
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx"), "--index_factory",
                       "SQ8", "--rescore_store", "fp32", "--target_recall", "0"]) == 0
    assert search_main(["--index", str(root / "idx"), "--encoded_queries", str(root / "q.pkl"), "--output",
                        str(root / "ref.trec"), "--hits", "5"]) == 0
    return {"index": root / "idx", "queries": root / "q.pkl", "reference": root / "ref.trec"}


def _store_edit(store: Path, meta: dict, kind: str, at: int, byte: int) -> None:
    views = np.load(store)
    if kind == "store_truncated":
        data = store.read_bytes()
        store.write_bytes(data[:at % len(data)])
    elif kind == "store_flip":
        data = store.read_bytes()
        at %= len(data)
        store.write_bytes(data[:at] + bytes([data[at] ^ (byte or 1)]) + data[at + 1:])
    elif kind == "store_same_shape":  # another store of the same shape and dtype
        np.save(store, np.roll(views, 1 + at % (len(views) - 1), axis=0))
    elif kind == "store_fp16":
        np.save(store, views.astype(np.float16))
    elif kind == "store_rows":
        np.save(store, views[:-1 - at % 5])
    elif kind == "store_deleted":
        store.unlink()
    elif kind == "meta_rows":
        meta["rescore_store"]["rows"] = 47
    elif kind == "meta_dtype":
        meta["rescore_store"]["dtype"] = ["int8", "float64", None, 3][at % 4]
    elif kind == "meta_file":
        meta["rescore_store"]["file"] = ["../c.pkl", "", "docid", "/etc/passwd"][at % 4]
    elif kind == "meta_fingerprint":
        meta["files"]["rescore_views.npy"] = "1 bytes, sampled sha256 0"
    elif kind == "meta_files_type":
        meta["files"] = ["index", "docid"]


STORE_DAMAGE = ["none", "store_truncated", "store_flip", "store_same_shape", "store_fp16", "store_rows",
                "store_deleted", "meta_rows", "meta_dtype", "meta_file", "meta_fingerprint", "meta_files_type"]


@pytest.mark.parametrize("kind", STORE_DAMAGE)
@bounded(PER_KIND)
@given(at=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_search_over_a_damaged_rescore_store_equals_reference_or_one_line(store_folder, kind, at, byte):
    """The re-scoring store and the files record: any change since the build is one line naming the folder,
    never a run from other vectors."""
    with workdir() as tmp:
        idx = tmp / "idx"
        shutil.copytree(store_folder["index"], idx)
        meta = json.loads((idx / "multiview.json").read_text())
        _store_edit(idx / "rescore_views.npy", meta, kind, at, byte)
        (idx / "multiview.json").write_text(json.dumps(meta))
        out = tmp / "run.trec"
        rc, err = run_driver(search_main, ["--index", str(idx), "--encoded_queries", str(store_folder["queries"]),
                                           "--output", str(out), "--hits", "5"])
        if rc:
            assert str(idx) in err and kind != "none", err
            assert not out.exists()
            return
        assert kind == "none", kind
        assert read_run(out) == read_run(store_folder["reference"])


def test_the_shard_paths_are_checked_before_anything_is_read(tmp_path):
    """Every backend's first check (Faiss and Qdrant builds): at least one shard, each an existing file."""
    from multiview_plugin.encoding.shards import ShardFormatError
    from multiview_plugin.index.meta import check_shard_paths

    with pytest.raises(ShardFormatError, match="no shards given"):
        check_shard_paths([])
    with pytest.raises(ShardFormatError, match="missing.pkl does not exist"):
        check_shard_paths([tmp_path / "missing.pkl"])
    (tmp_path / "c.pkl").write_bytes(b"")
    assert check_shard_paths([str(tmp_path / "c.pkl")]) == [tmp_path / "c.pkl"]
