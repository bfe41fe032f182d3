"""The project's Qdrant data model on Qdrant's own engine (qdrant-edge-py, Rust, in the process): views as a MAX_SIM
multivector, the document-vector prefetch, then the re-rank. Exact search equals Faiss Flat with max aggregation
over every rank; the prefetch path, with the candidate count calibrated for the depth asked, keeps >= 0.98 of exact
top-k at k = 10 and k = 100 on held-out queries (and HNSW is really built on the document vectors here)."""

import json

import numpy as np
import pytest

pytest.importorskip("qdrant_edge")

from multiview_plugin.driver import index as index_driver  # noqa: E402
from multiview_plugin.errors import ConfigError  # noqa: E402
from multiview_plugin.search import MultiVectorSearcher, build_index  # noqa: E402
from multiview_plugin.search import _qdrant_engines as engines  # noqa: E402
from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded  # noqa: E402
from multiview_plugin.search.calibrate import calibrate_index  # noqa: E402
from tests.search.test_qdrant import DIM, brute_force, corpus, driver_run, write_queries, write_shards  # noqa: E402


@pytest.fixture(autouse=True)
def _release():
    yield
    close_embedded()


def held_out_queries(reps, n, seed=11):
    """Between documents, as real queries are: the midpoint of two documents' first views, plus noise."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, len(reps), n), rng.integers(0, len(reps), n)
    return ((reps[a, 0] + reps[b, 0]) / 2 + 0.3 * rng.standard_normal((n, DIM))).astype(np.float32)


def recall(got, want, k):
    return float(np.mean([len(set(g[:k]) & set(w[:k])) / k for g, w in zip(got, want)]))


def test_edge_exact_equals_faiss_flat_max_over_every_rank(tmp_path):
    docids, reps, mask = corpus()
    paths = write_shards(tmp_path, docids, reps, mask)
    build_index(paths, tmp_path / "flat", aggregation="max")
    meta = build_qdrant_index(paths, tmp_path / "edge", engine="edge", batch_size=17)
    assert meta.qdrant["engine"] == "edge" and (tmp_path / "edge" / "qdrant" / "edge" / "edge_config.json").is_file()
    q = np.random.default_rng(5).standard_normal((15, DIM)).astype(np.float32)
    k = len(docids)
    flat_ids, flat_scores = MultiVectorSearcher(tmp_path / "flat", aggregation="max").search_vectors(q, k)
    edge = MultiVectorSearcher(tmp_path / "edge", exact=True)
    assert isinstance(edge.store.collection, engines.EdgeCollection)
    edge_ids, edge_scores = edge.search_vectors(q, k)
    assert edge_ids.tolist() == flat_ids.tolist()
    np.testing.assert_allclose(edge_scores, flat_scores, rtol=1e-5, atol=1e-5)
    # explanations read a document's views back from the edge shard
    np.testing.assert_allclose(edge.store.doc_vectors(3), reps[3][mask[3]], rtol=1e-6)


def test_edge_prefetch_keeps_098_at_the_calibrated_depth(tmp_path, monkeypatch):
    # a low indexing threshold makes Qdrant build its HNSW graph on these few documents, so the prefetch is the
    # graph search a large collection gets, not a scan
    monkeypatch.setattr(engines, "EDGE_INDEXING_THRESHOLD_KB", 1)
    n = 2000
    docids, reps, mask = corpus(n, (1, 8), seed=3)
    paths = write_shards(tmp_path, docids, reps, mask, 2)
    q = held_out_queries(reps, 100)
    for cal_k in (10, 100):
        folder = tmp_path / f"edge{cal_k}"
        build_qdrant_index(paths, folder, engine="edge")
        record = calibrate_index(folder, 0.98, 200, cal_k)
        searcher = MultiVectorSearcher(folder)
        assert searcher.store.collection.indexed_vectors() > 0  # HNSW built
        got = searcher.search_vectors(q, cal_k)[0].tolist()
        want = [[docids[i] for i in row] for row in brute_force(q, reps, mask, cal_k)[0]]
        kept = recall(got, want, cal_k)
        assert searcher.store.candidates(cal_k) < n  # not a full scan in disguise
        assert kept >= 0.98, (cal_k, record["settings"], kept)
        exact = MultiVectorSearcher(folder, exact=True).search_vectors(q, cal_k)[0].tolist()
        assert exact == want
    # calibration at k = 10 does not carry to k = 100: fewer candidates, and the searcher says so
    ten, hundred = MultiVectorSearcher(tmp_path / "edge10"), MultiVectorSearcher(tmp_path / "edge100")
    assert ten.store.candidates(100) < hundred.store.candidates(100)
    assert ten.store.calibrated_k == 10
    want = [[docids[i] for i in row] for row in brute_force(q, reps, mask, 100)[0]]
    assert recall(ten.search_vectors(q, 100)[0].tolist(), want, 100) < 0.98


def test_deeper_than_calibrated_warns(tmp_path, caplog):
    docids, reps, mask = corpus(600, (1, 8), seed=3)
    folder = tmp_path / "edge"
    build_qdrant_index(write_shards(tmp_path, docids, reps, mask, 1), folder, engine="edge")
    calibrate_index(folder, 0.98, 50, 10)
    searcher = MultiVectorSearcher(folder)
    searcher.store.min_doc_candidates = 50
    q = held_out_queries(reps, 4)
    searcher.search_vectors(q, 10)
    assert "was calibrated for recall@10" not in caplog.text
    searcher.search_vectors(q, 40)
    assert "was calibrated for recall@10; at depth 40" in caplog.text and "--calibration_k 40" in caplog.text


def test_driver_builds_and_searches_on_edge(tmp_path, capsys):
    docids, reps, mask = corpus(60)
    write_shards(tmp_path, docids, reps, mask, 2)
    write_queries(tmp_path, np.random.default_rng(9).standard_normal((6, DIM)).astype(np.float32))
    glob_ = str(tmp_path / "corpus.*.pkl")
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "flat")]) == 0
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "edge"), "--backend", "qdrant",
                              "--qdrant_engine", "edge", "--target_recall", "0"]) == 0
    assert json.loads((tmp_path / "edge" / "multiview.json").read_text())["qdrant"]["engine"] == "edge"
    assert driver_run(tmp_path, "edge", "--qdrant_exact") == driver_run(tmp_path, "flat")
    # the engine flag changes what is built: the client engine writes qdrant-client's local storage instead
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "client"), "--backend",
                              "qdrant", "--target_recall", "0"]) == 0
    assert (tmp_path / "client" / "qdrant" / "meta.json").is_file()
    assert not (tmp_path / "edge" / "qdrant" / "meta.json").exists()
    # edge does not reach servers
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "x"), "--backend", "qdrant",
                              "--qdrant_engine", "edge", "--qdrant_url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "error: --qdrant_engine edge runs Qdrant's engine in this process" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_edge_resume_and_foreign_shard_folder(tmp_path, monkeypatch):
    from multiview_plugin.search import _qdrant

    docids, reps, mask = corpus(90)
    paths = write_shards(tmp_path, docids, reps, mask)
    calls = {"n": 0}
    real = _qdrant._upsert

    def failing(coll, points):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed mid-ingest")
        real(coll, points)

    monkeypatch.setattr(_qdrant, "_upsert", failing)
    with pytest.raises(RuntimeError):
        build_qdrant_index(paths, tmp_path / "edge", engine="edge", batch_size=10)
    close_embedded()  # as a new process would find it
    meta = build_qdrant_index(paths, tmp_path / "edge", engine="edge", batch_size=10)
    assert meta.num_docs == 90
    assert MultiVectorSearcher(tmp_path / "edge").store.collection.count() == 90
    # a shard folder qdrant-edge did not get from this tool is never touched, even with --overwrite
    store = tmp_path / "store"
    (store / "theirs").mkdir(parents=True)
    (store / "theirs" / "data.bin").write_bytes(b"x")
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match="not created by multiview_plugin"):
            build_qdrant_index(paths, tmp_path / "other", engine="edge", qdrant_path=store, collection="theirs",
                               overwrite=overwrite)
    assert (store / "theirs" / "data.bin").read_bytes() == b"x"
