"""The Qdrant backend in embedded mode: exact search equals Faiss Flat over every rank, resumable ingest, refusals,
CLI wiring (the index folder names the collection, so search needs no Qdrant flags)."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("qdrant_client")

from multiview_plugin.driver import index as index_driver  # noqa: E402
from multiview_plugin.driver import search as search_driver  # noqa: E402
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter  # noqa: E402
from multiview_plugin.errors import ConfigError  # noqa: E402
from multiview_plugin.search import (  # noqa: E402
    MultiVectorSearcher,
    _qdrant,  # noqa: E402
    build_index,
)
from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded, point_id  # noqa: E402
from multiview_plugin.search._qdrant_engines import ClientCollection, open_local_client  # noqa: E402
from multiview_plugin.search.report import index_report as index_driver_report  # noqa: E402

DIM = 16


@pytest.fixture(autouse=True)
def _release_embedded():
    yield
    close_embedded()  # embedded storage folders are locked while a client is open


def corpus(n_docs=120, views=(1, 7), seed=0, spread=1.0):
    rng = np.random.default_rng(seed)
    counts = rng.integers(views[0], views[1] + 1, n_docs)
    centre = rng.standard_normal((n_docs, 1, DIM))
    reps = (centre + spread * rng.standard_normal((n_docs, views[1], DIM))).astype(np.float32)
    mask = np.arange(views[1])[None, :] < counts[:, None]
    return [f"doc{i}" for i in range(n_docs)], reps, mask


def write_shards(folder, docids, reps, mask, n_shards=3, model="test"):
    bounds = np.linspace(0, len(docids), n_shards + 1).astype(int)
    paths = []
    for s in range(n_shards):
        info = ShardInfo(model_name=model, dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=n_shards)
        w = ShardWriter(folder / f"corpus.{s}.pkl", info, multi_vector=True)
        w.add(docids[bounds[s]:bounds[s + 1]], reps[bounds[s]:bounds[s + 1]], mask[bounds[s]:bounds[s + 1]])
        w.close()
        paths.append(folder / f"corpus.{s}.pkl")
    return paths


def write_queries(folder, q):
    """``folder/queries.pkl``: one query vector per row of ``q`` (ids q0, q1, ...)."""
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     is_query=True)
    w = ShardWriter(folder / "queries.pkl", info, multi_vector=False)
    w.add([f"q{i}" for i in range(len(q))], q)
    w.close()
    return folder / "queries.pkl"


def driver_run(folder, index_name, *extra):
    """The search driver's top-20 run over ``folder/index_name`` for ``folder/queries.pkl``: (qid, Q0, docid, rank)
    rows."""
    out = folder / f"{index_name}.trec"
    assert search_driver.main(["--index", str(folder / index_name), "--encoded_queries", str(folder / "queries.pkl"),
                               "--output", str(out), "--hits", "20", *extra]) == 0
    return [line.split()[:4] for line in out.read_text().splitlines()]


def brute_force(q, reps, mask, k):
    scores = np.where(mask[None], np.einsum("qd,nkd->qnk", q, reps), -np.inf).max(-1)
    order = np.argsort(-scores, axis=1)[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


def test_exact_mode_equals_faiss_flat_over_every_rank(tmp_path):
    docids, reps, mask = corpus()
    paths = write_shards(tmp_path, docids, reps, mask)
    build_index(paths, tmp_path / "flat")
    meta = build_qdrant_index(paths, tmp_path / "qd", batch_size=17)
    assert meta.backend == "qdrant" and meta.views_per_doc == "variable"
    q = np.random.default_rng(5).standard_normal((15, DIM)).astype(np.float32)
    k = len(docids)  # every rank
    flat_ids, flat_scores = MultiVectorSearcher(tmp_path / "flat").search_vectors(q, k)
    qd_ids, qd_scores = MultiVectorSearcher(tmp_path / "qd", exact=True).search_vectors(q, k)
    assert qd_ids.tolist() == flat_ids.tolist()
    np.testing.assert_allclose(qd_scores, flat_scores, rtol=1e-5, atol=1e-5)
    want, _ = brute_force(q, reps, mask, k)
    assert qd_ids.tolist() == [[docids[i] for i in row] for row in want]


def test_candidates_versus_exact(tmp_path):
    # widely spread views: the document vectors' top 20 miss some exact top-10 documents
    docids, reps, mask = corpus(150, (4, 12), seed=1, spread=3.0)
    build_qdrant_index(write_shards(tmp_path, docids, reps, mask, 2), tmp_path / "qd")
    q = np.random.default_rng(2).standard_normal((20, DIM)).astype(np.float32)
    want = [[docids[i] for i in row] for row in brute_force(q, reps, mask, 10)[0]]
    searcher = MultiVectorSearcher(tmp_path / "qd", doc_candidates=2.0)
    searcher.store.min_doc_candidates = 0  # 2 x 10 = 20 candidates
    approx = searcher.search_vectors(q, 10)[0].tolist()
    searcher.store.exact = True
    assert searcher.search_vectors(q, 10)[0].tolist() == want
    assert approx != want  # the exact flag changes what comes back here
    searcher.store.exact, searcher.store.min_doc_candidates = False, 150  # all documents as candidates: exact
    assert searcher.search_vectors(q, 10)[0].tolist() == want


def test_interrupted_ingest_resumes_without_duplicates(tmp_path, monkeypatch):
    docids, reps, mask = corpus(90)
    paths = write_shards(tmp_path, docids, reps, mask)
    calls = {"n": 0, "points": 0}
    real = _qdrant._upsert

    def failing(coll, points):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("killed mid-ingest")
        calls["points"] += len(points)
        real(coll, points)

    monkeypatch.setattr(_qdrant, "_upsert", failing)
    with pytest.raises(RuntimeError, match="killed"):
        build_qdrant_index(paths, tmp_path / "qd", batch_size=10)
    assert not (tmp_path / "qd" / "multiview.json").exists()  # an unfinished folder is not an index
    done_before = calls["points"]
    assert 0 < done_before < len(docids)
    calls["n"] = -100  # no more failures
    meta = build_qdrant_index(paths, tmp_path / "qd", batch_size=10)
    assert meta.num_docs == len(docids)
    assert calls["points"] == len(docids)  # the rerun upserted only what was missing
    coll = _qdrant.QdrantSettings(**meta.qdrant).connect(tmp_path / "qd")
    assert coll.count() == len(docids)
    ids = {p.id for p in coll.client.scroll(meta.qdrant["collection"], limit=1000)[0]}
    assert ids == {point_id(d) for d in docids}
    q = np.random.default_rng(3).standard_normal((5, DIM)).astype(np.float32)
    got = MultiVectorSearcher(tmp_path / "qd", exact=True).search_vectors(q, 10)[0].tolist()
    assert got == [[docids[i] for i in row] for row in brute_force(q, reps, mask, 10)[0]]


def test_collection_of_another_model_is_refused(tmp_path):
    docids, reps, mask = corpus(30)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    build_qdrant_index(write_shards(tmp_path / "a", docids, reps, mask, 1, model="test"), tmp_path / "qd",
                       collection="shared")
    other = write_shards(tmp_path / "b", docids, reps, mask, 1, model="other")
    with pytest.raises(ConfigError, match="another model"):
        build_qdrant_index(other, tmp_path / "qd2", qdrant_path=tmp_path / "qd" / "qdrant", collection="shared")
    # --overwrite rebuilds a collection this tool made
    meta = build_qdrant_index(other, tmp_path / "qd2", qdrant_path=tmp_path / "qd" / "qdrant", collection="shared",
                              overwrite=True)
    assert meta.model_name == "other"


def test_foreign_collection_untouched(tmp_path):
    from qdrant_client import models

    docids, reps, mask = corpus(20)
    paths = write_shards(tmp_path, docids, reps, mask, 1)
    client = open_local_client(str(tmp_path / "store"))
    client.create_collection("theirs", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.DOT))
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match="not created by multiview_plugin"):
            build_qdrant_index(paths, tmp_path / "qd", qdrant_path=tmp_path / "store", collection="theirs",
                               overwrite=overwrite)
    assert client.collection_exists("theirs")


def test_hasans_refused(tmp_path):
    docids, reps, mask = corpus(20)
    with pytest.raises(ConfigError, match="MAX_SIM"):
        build_qdrant_index(write_shards(tmp_path, docids, reps, mask, 1), tmp_path / "qd", aggregation="hasans")


def test_missing_extra_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "qdrant_client", None)
    with pytest.raises(ConfigError, match=r"pip install 'multiview_plugin\[qdrant\]'"):
        _qdrant.require_qdrant()


def test_creation_flags_reach_the_server(tmp_path, monkeypatch):
    """--qdrant_url's creation flags (shards, replication, on-disk) are what create_collection receives; an
    in-memory client stands in for the server."""
    import qdrant_client

    created = {}
    memory = qdrant_client.QdrantClient(":memory:")
    real_create = memory.create_collection

    def create(name, **kwargs):
        created.update(kwargs, name=name)
        return real_create(name, **kwargs)

    memory.create_collection = create
    memory.create_payload_index = lambda *a, **k: created.setdefault("payload_index", a[1])
    monkeypatch.setattr(_qdrant.QdrantSettings, "connect", lambda self, index_dir=None, timeout=None: ClientCollection(
        self.collection, url=self.url, client=memory))
    docids, reps, mask = corpus(20)
    paths = write_shards(tmp_path, docids, reps, mask, 1)
    assert index_driver.main(["--passage_reps", str(tmp_path / "corpus.*.pkl"), "--index_dir", str(tmp_path / "qd"),
                              "--backend", "qdrant", "--qdrant_url", "http://cluster:6333", "--qdrant_shards", "6",
                              "--qdrant_replication", "2", "--qdrant_on_disk", "--qdrant_collection", "wiki",
                              "--hnsw_ef_construction", "64"]) == 0
    assert created["name"] == "wiki" and created["shard_number"] == 6 and created["replication_factor"] == 2
    assert created["vectors_config"]["doc"].hnsw_config.ef_construct == 64  # --hnsw_ef_construction
    assert created["vectors_config"]["views"].on_disk and created["vectors_config"]["doc"].on_disk
    assert created["payload_index"] == "docid"
    recorded = json.loads((tmp_path / "qd" / "multiview.json").read_text())["qdrant"]
    assert recorded["url"] == "http://cluster:6333" and recorded["shard_number"] == 6 and recorded["on_disk"]
    assert len(paths) == 1


def test_cli_index_and_search_write_the_faiss_run(tmp_path, capsys):
    docids, reps, mask = corpus(60)
    write_shards(tmp_path, docids, reps, mask, 2)
    q = np.random.default_rng(9).standard_normal((6, DIM)).astype(np.float32)
    write_queries(tmp_path, q)
    glob_ = str(tmp_path / "corpus.*.pkl")
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "flat")]) == 0
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "qd"), "--backend", "qdrant",
                              "--qdrant_path", str(tmp_path / "store"), "--qdrant_batch_size", "7"]) == 0
    assert "qdrant           collection" in index_driver_report(tmp_path / "qd")
    assert driver_run(tmp_path, "qd", "--qdrant_exact") == driver_run(tmp_path, "flat")
    # explanations read the winning view from the collection
    out = tmp_path / "qd.jsonl"
    assert search_driver.main(["--index", str(tmp_path / "qd"), "--encoded_queries", str(tmp_path / "queries.pkl"),
                               "--output", str(tmp_path / "x.trec"), "--hits", "3", "--explain", str(out)]) == 0
    first = json.loads(out.read_text().splitlines()[0])
    doc = docids.index(first["docid"])
    assert first["view"] == int(np.argmax(np.where(mask[doc], reps[doc] @ q[0], -np.inf)))
    # qdrant flags without --backend qdrant are refused, not ignored
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "x"), "--qdrant_on_disk"]) != 0
    assert "--qdrant_on_disk needs --backend qdrant" in capsys.readouterr().err
    assert index_driver.main(["--passage_reps", glob_, "--index_dir", str(tmp_path / "y"), "--backend", "qdrant",
                              "--hnsw_ef_construction", "3"]) == 2  # below Qdrant's minimum: one line, nothing made
    assert "--hnsw_ef_construction with --backend qdrant must be >= 4" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()


def test_analysis_reads_views_from_the_collection(tmp_path):
    from multiview_plugin.evaluation.view_usage import pair_view_scores

    docids, reps, mask = corpus(40)
    paths = write_shards(tmp_path, docids, reps, mask, 2)
    build_index(paths, tmp_path / "flat")
    build_qdrant_index(paths, tmp_path / "qd")
    q = np.random.default_rng(4).standard_normal((3, DIM)).astype(np.float32)
    pairs = [(0, 0), (1, 17), (2, 39)]
    want = pair_view_scores(MultiVectorSearcher(tmp_path / "flat"), q, pairs)
    got = pair_view_scores(MultiVectorSearcher(tmp_path / "qd"), q, pairs)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("engine", ["client", "edge"])
@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", ".", "", "x\\y", "bad\nname", " padded"])
def test_collection_names_that_are_not_plain_names_are_refused(tmp_path, capsys, engine, name):
    """index: --qdrant_collection ../escaped with --qdrant_engine edge wrote the collection outside --qdrant_path."""
    if engine == "edge":
        pytest.importorskip("qdrant_edge")
    docids, reps, mask = corpus(12)
    paths = write_shards(tmp_path, docids, reps, mask, 1)
    storage = tmp_path / "area" / "storage"
    storage.mkdir(parents=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    capsys.readouterr()
    assert index_driver.main(["--passage_reps", str(paths[0]), "--index_dir", str(tmp_path / "idx"), "--backend",
                              "qdrant", "--qdrant_engine", engine, "--qdrant_path", str(storage),
                              "--qdrant_collection", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --qdrant_collection ") and "plain collection name" in err and err.count("\n") == 1
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(name=st.text(max_size=12) | st.sampled_from(["..", ".", "../x", "a/../..", "ok-name_1.v2", "c:d", "ü"]))
def test_an_accepted_collection_name_stays_inside_its_storage_folder(name):
    """Every name is refused in one line or names a folder directly inside the storage (edge engine, local mode);
    the index folder's recorded ``qdrant.collection`` goes through the same check."""
    storage = Path("/srv/storage")
    try:
        _qdrant.check_collection_name(name)
    except ConfigError as err:
        assert "\n" not in str(err) and "plain collection name" in str(err)
        with pytest.raises(ConfigError, match="field 'qdrant.collection'"):
            _qdrant.QdrantSettings.from_record({"collection": name, "path": "qdrant"}, "idx/multiview.json")
        return
    assert os.path.normpath(storage / name) == str(storage / name) and (storage / name).parent == storage
    assert _qdrant.QdrantSettings.from_record({"collection": name, "path": "qdrant"}, "m.json").collection == name
