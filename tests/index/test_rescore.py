"""The on-disk re-scoring store (``build_index(rescore_store=)``, ``driver.index --rescore_store``): an IVF,SQ8
index whose candidates are re-scored from an fp32 copy of the views ranks exactly as the Flat searcher, where the
SQ8 codes alone do not; fp16 stays within 1e-3; the file, its meta record and its errors."""

from __future__ import annotations

import json
import os
import shutil

import faiss
import numpy as np
import pytest

from multiview_plugin.driver import index as index_driver
from multiview_plugin.driver import search as search_driver
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter, read_shard
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.index import build
from multiview_plugin.index.adds import PresizedIVFAdds
from multiview_plugin.index.folder import INDEX_FOLDER_FILES, RESCORE_STORE_FILE
from multiview_plugin.search import IndexMeta, MultiVectorSearcher, build_index
from multiview_plugin.search.calibrate import calibrate_index
from multiview_plugin.search.report import index_report
from tests.search.test_calibrate import synthetic
from tools.synthetic_vectors import clustered_queries

N_DOCS, MAX_VIEWS, DIM, NLIST = 300, 6, 16, 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    # 300 clustered documents with 1-6 views (two shards): near-tied views, where SQ8's 8-bit codes reorder the
    # top 10 (of 22 of the 50 queries when this was written)
    docs, mask, paths = synthetic(root, N_DOCS, (1, MAX_VIEWS), DIM, 1.0, 1.0, 3)
    for name, factory, store in (("flat", "Flat", "none"), ("sq8", f"IVF{NLIST},SQ8", "none"),
                                 ("fp32", f"IVF{NLIST},SQ8", "fp32"), ("fp16", f"IVF{NLIST},SQ8", "fp16")):
        build_index(paths, root / name, index_factory=factory, rescore_store=store)
    return {"root": root, "docs": docs, "mask": mask, "paths": paths,
            "queries": clustered_queries(docs, 50, seed=5)}


def max_sim(built, ids: np.ndarray) -> np.ndarray:
    """Exact max over each returned document's views (brute force)."""
    docs, mask, q = built["docs"], built["mask"], built["queries"]
    doc = np.vectorize(lambda d: int(d[1:]))(ids)
    sims = np.einsum("qd,qkvd->qkv", q, docs[doc])
    return np.where(mask[doc], sims, -np.inf).max(-1)


def test_fp32_store_ranks_exactly_as_flat_where_sq8_codes_do_not(built):
    root, q = built["root"], built["queries"]
    exact_ids, exact_scores = MultiVectorSearcher(root / "flat").search_vectors(q, 10)
    stored = MultiVectorSearcher(root / "fp32", nprobe=NLIST)  # every list probed
    assert stored.store.approximate.can_rescore  # on by default with a store
    ids, scores = stored.search_vectors(q, 10)
    assert (ids == exact_ids).all()
    np.testing.assert_allclose(scores, exact_scores, rtol=0, atol=1e-5)
    # the same index re-scored from its SQ8 codes: other documents, and scores off by the quantisation
    codes_ids, codes_scores = MultiVectorSearcher(root / "sq8", nprobe=NLIST).search_vectors(q, 10)
    assert (codes_ids != exact_ids).any(axis=1).mean() > 0.2
    assert np.abs(codes_scores - exact_scores).max() > 1e-3


def test_fp16_store_scores_within_1e_3_of_exact(built):
    root, q = built["root"], built["queries"]
    exact_ids, exact_scores = MultiVectorSearcher(root / "flat").search_vectors(q, 10)
    ids, scores = MultiVectorSearcher(root / "fp16", nprobe=NLIST).search_vectors(q, 10)
    np.testing.assert_allclose(scores, max_sim(built, ids), rtol=0, atol=1e-3)
    np.testing.assert_allclose(scores, exact_scores, rtol=0, atol=1e-3)


def test_store_file_and_meta(built):
    root, docs, mask = built["root"], built["docs"], built["mask"]
    for name, dtype in (("fp32", np.float32), ("fp16", np.float16)):
        meta = IndexMeta.load(root / name)
        views = np.load(root / name / RESCORE_STORE_FILE, mmap_mode="r")
        assert views.shape == (meta.num_vectors, DIM) == (int(mask.sum()), DIM) and views.dtype == dtype
        np.testing.assert_array_equal(views, docs[mask].astype(dtype))  # every view, in index row order
        assert meta.rescore_store == {"file": RESCORE_STORE_FILE, "dtype": np.dtype(dtype).name,
                                      "rows": meta.num_vectors, "dim": DIM}
        assert json.loads((root / name / "multiview.json").read_text())["rescore_store"] == meta.rescore_store
        assert not [p for p in os.listdir(root / name) if p.startswith(".")]  # no partial file left
    # none: no file, nothing recorded
    assert sorted(os.listdir(root / "sq8")) == ["docid", "index", "multiview.json"]
    assert IndexMeta.load(root / "sq8").rescore_store is None
    assert RESCORE_STORE_FILE in INDEX_FOLDER_FILES
    # re-scoring no longer needs reconstruction: no IVF direct map (8 bytes per vector) is made
    stored = MultiVectorSearcher(root / "fp32")
    assert faiss.extract_index_ivf(stored.store.index).direct_map.type == faiss.DirectMap.NoMap
    # explanations read the views the search scored with
    np.testing.assert_array_equal(stored.explainer.doc_vectors(0), docs[0][mask[0]])


def test_store_is_written_chunk_by_chunk_and_overwrite_replaces_it(built, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "ADD_CHUNK", 100)
    sizes = []
    real_add = build.RescoreStoreWriter.add
    monkeypatch.setattr(build.RescoreStoreWriter, "add",
                        lambda self, chunk, source: (sizes.append(len(chunk)), real_add(self, chunk, source)))
    out = tmp_path / "idx"
    build_index(built["paths"], out, index_factory="HNSW16", rescore_store="fp16")
    assert max(sizes) <= 100 and sum(sizes) == int(built["mask"].sum())
    assert MultiVectorSearcher(out).store.approximate.can_rescore  # HNSW too, once it has a store
    # --overwrite replaces a folder holding a store (it is one of the folder's own files)
    build_index(built["paths"], out, index_factory=f"IVF{NLIST},SQ8", overwrite=True)
    assert not (out / RESCORE_STORE_FILE).exists()


def test_flat_and_unknown_store_are_refused(built, tmp_path):
    with pytest.raises(ConfigError, match="Flat index holds the exact vectors"):
        build_index(built["paths"], tmp_path / "flat", rescore_store="fp16")
    with pytest.raises(ConfigError, match="expected one of none, fp16, fp32"):
        build_index(built["paths"], tmp_path / "x", index_factory="HNSW16", rescore_store="bf16")
    assert not list(tmp_path.iterdir())  # nothing left behind, not even the build's temporary folder


@pytest.mark.parametrize("damage", ["missing", "truncated", "other shape"])
def test_damaged_store_is_a_one_line_error(built, tmp_path, damage):
    index = tmp_path / "idx"
    shutil.copytree(built["root"] / "fp16", index)
    path = index / RESCORE_STORE_FILE
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:-100])
    else:
        np.save(path, np.zeros((7, DIM), np.float16))
    rows = IndexMeta.load(index).num_vectors
    with pytest.raises(MultiViewError) as err:
        MultiVectorSearcher(index)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and f"expected {rows} rows x {DIM} float16" in message


def test_driver_flag_reaches_build_and_search(built, tmp_path, capsys):
    glob_ = str(built["root"] / "c.*.pkl")
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "h"), "--index_factory",
                              f"IVF{NLIST},SQ8", "--rescore_store", "fp32", "--target_recall", "0"]) == 0
    meta = IndexMeta.load(tmp_path / "h")
    assert meta.rescore_store["dtype"] == "float32" and (tmp_path / "h" / RESCORE_STORE_FILE).is_file()
    assert "rescore store" in index_report(tmp_path / "h")
    # without the flag: none
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "n"), "--index_factory",
                              f"IVF{NLIST},SQ8", "--target_recall", "0"]) == 0
    assert IndexMeta.load(tmp_path / "n").rescore_store is None
    # pointless for Flat, and a Faiss flag: one-line errors
    capsys.readouterr()
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "f"),
                              "--rescore_store", "fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(_error_lines(err)) == 1 and "--rescore_store fp16" in err and "Traceback" not in err
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "q"), "--backend", "qdrant",
                              "--rescore_store", "fp16"]) == 2
    assert "--rescore_store" in capsys.readouterr().err
    # a truncated store: the search driver says so in one line
    store = tmp_path / "h" / RESCORE_STORE_FILE
    store.write_bytes(store.read_bytes()[:200])
    info = ShardInfo(model_name="syn", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     is_query=True)
    w = ShardWriter(tmp_path / "queries.pkl", info, multi_vector=False)
    w.add([f"q{i}" for i in range(5)], built["queries"][:5])
    w.close()
    assert search_driver.main(["--index", str(tmp_path / "h"), "--encoded_queries", str(tmp_path / "queries.pkl"),
                               "--output", str(tmp_path / "run.trec")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(_error_lines(err)) == 1 and str(store) in err and "Traceback" not in err


def test_doc_index_candidates_and_calibration_use_the_store(built, tmp_path):
    exact_ids, exact_scores = MultiVectorSearcher(built["root"] / "flat").search_vectors(built["queries"], 10)
    build_index(built["paths"], tmp_path / "d", index_factory=f"IVF{NLIST},SQ8", doc_index_factory="Flat",
                rescore_store="fp32")
    searcher = MultiVectorSearcher(tmp_path / "d")
    searcher.store.approximate.min_doc_candidates = N_DOCS  # every document a candidate: exact
    ids, scores = searcher.search_vectors(built["queries"], 10)
    assert (ids == exact_ids).all()
    np.testing.assert_allclose(scores, exact_scores, rtol=0, atol=1e-5)
    # the build-time calibration searches through the searcher, so it measures the store's recall
    shutil.copytree(built["root"] / "fp32", tmp_path / "c")  # calibration rewrites the meta: not the shared one
    record = calibrate_index(tmp_path / "c", target_recall=0.98, n_queries=60)
    assert record["kind"] == "ivf" and record["aim_reached"] and record["recall"] == 1.0


def _error_lines(err: str) -> list[str]:
    """The lines of stderr that report an error (progress bars, drawn unless TQDM_DISABLE is set, are not)."""
    return [line for line in err.splitlines() if "error" in line.lower()]


def test_a_shard_that_shrank_between_the_ivf_passes_is_an_error(built, tmp_path):
    """The first pass assigned every vector to a list; adds that leave assignments unused would have put each later
    vector in another vector's list, so finishing with assignments left over is an error."""
    index = faiss.index_factory(DIM, f"IVF{NLIST},SQ8", faiss.METRIC_INNER_PRODUCT)
    sample = np.concatenate([read_shard(p)[0] for p in built["paths"]]).astype(np.float32)
    index.train(sample)
    presized = PresizedIVFAdds.prepare(index, built["paths"], tmp_path / "assign", False)
    try:
        presized.add(np.ascontiguousarray(sample[:10]))
        with pytest.raises(MultiViewError, match="fewer vectors than the first pass assigned"):
            presized.finish()
    finally:
        presized.close()


def test_a_store_beside_hasans_aggregation_warns(built, tmp_path, caplog):
    """dcsr's HasAns does not re-score, so a store it would never read is named at build time."""
    with caplog.at_level("WARNING"):
        build_index(built["paths"], tmp_path / "h", index_factory=f"IVF{NLIST},SQ8", aggregation="hasans",
                    rescore_store="fp16")
    assert any("serves max aggregation" in r.message for r in caplog.records)


@pytest.mark.parametrize("name", [RESCORE_STORE_FILE, "index", "docid"])
def test_a_file_replaced_by_another_of_the_same_shape_is_refused(built, tmp_path, name):
    """main: an index folder's rescore_views.npy (or Faiss index, or docid file) replaced by another of the same
    shape was used without a word. multiview.json now records each file's size and sampled SHA-256."""
    index = tmp_path / "idx"
    shutil.copytree(built["root"] / "fp32", index)
    path = index / name
    if name == RESCORE_STORE_FILE:  # same shape and dtype, other vectors
        np.save(path, np.load(path)[::-1].copy())
    elif name == "index":  # another IVF,SQ8 index of the same vectors, trained on another sample
        build_index(built["paths"], tmp_path / "other", index_factory=f"IVF{NLIST},SQ8", rescore_store="fp32",
                    train_size=200)
        assert (tmp_path / "other" / "index").read_bytes() != path.read_bytes()
        shutil.copyfile(tmp_path / "other" / "index", path)
    else:  # as many lines, one document renamed: its hits would be credited to another document
        path.write_text("".join(("d999" + line[2:]) if line.startswith("d1#") else line
                                for line in path.read_text().splitlines(keepends=True)))
    assert IndexMeta.load(index).files[name]
    with pytest.raises(MultiViewError) as err:
        MultiVectorSearcher(index)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "not the file this index was built with" in message
    MultiVectorSearcher(built["root"] / "fp32")  # the untouched folder loads


def test_row_runs_cover_adjacent_rows_once():
    from multiview_plugin.index.rescore import _row_runs

    store = np.zeros((20, 4), dtype=np.float16)  # 8 bytes a row
    lo, hi = _row_runs(store, np.array([0, 0, 3, 4, 5, 5, 9]))
    assert lo.tolist() == [0, 24, 72] and hi.tolist() == [8, 48, 80]


def test_a_cold_store_has_its_candidates_read_ahead_and_scores_unchanged(tmp_path):
    """prefetch_rows asks for a cold store's candidate pages (one advice per run of adjacent rows), does nothing
    for a warm store or an array in memory, and re-scoring reads the same numbers either way."""
    from multiview_plugin.index.rescore import _mapping, _resident, advise_random_reads, prefetch_rows
    from multiview_plugin.search._searcher import _row_sims

    rng = np.random.default_rng(0)
    views = rng.standard_normal((4096, 64)).astype(np.float16)
    path = tmp_path / "rescore_views.npy"
    np.save(path, views)
    q = rng.standard_normal(64).astype(np.float32)
    rows = np.array([[1000, 1001, 1002], [2048, 2049, 4000]])  # past the header's read-ahead
    expected = views.astype(np.float32)[rows] @ q
    assert prefetch_rows(views, np.sort(rows.ravel())) == 0  # in memory: nothing to read

    with path.open("rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    store = np.load(path, mmap_mode="r")
    advise_random_reads(store)
    mm, start = _mapping(store)
    first = (store.ctypes.data + 1000 * store.strides[0]) // 4096 * 4096
    if _resident(first, 4096) is not False:
        pytest.skip("this file system keeps the file in memory (tmpfs?) or mincore cannot say")
    assert prefetch_rows(store, np.sort(rows.ravel())) == 3  # 1000-1002, 2048-2049, 4000
    np.testing.assert_allclose(_row_sims(store, rows, q), expected, rtol=1e-5, atol=1e-5)
    assert prefetch_rows(store, np.sort(rows.ravel())) == 0  # now warm


def test_advice_lands_on_the_rows_of_a_slice_of_the_store(tmp_path):
    """The prefetch's byte ranges are where the rows lie in the map, for the whole store and for a slice of it."""
    from multiview_plugin.index.rescore import _row0_in_map, _row_runs

    views = np.arange(4096 * 64, dtype=np.float16).reshape(4096, 64)
    np.save(tmp_path / "s.npy", views)
    store = np.load(tmp_path / "s.npy", mmap_mode="r")
    for part, first in ((store, 0), (store[1000:], 1000)):
        mm, row0 = _row0_in_map(part)
        lo, hi = _row_runs(part, np.array([0, 1, 5]))
        assert row0 == store.offset + first * 128  # after the .npy header
        assert lo.tolist() == [0, 5 * 128] and hi.tolist() == [2 * 128, 6 * 128]
        at = row0 + int(lo[1])
        assert np.frombuffer(mm[at:at + 128], dtype=np.float16).tolist() == views[first + 5].tolist()
    assert _row0_in_map(views) is None  # in memory
