"""The search backend interface (search/_backend.py): every backend implements all of it, each declared member
behaves the same way on Faiss and Qdrant, and no caller probes a backend with getattr/hasattr."""

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

import multiview_plugin
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter, read_shard
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.meta import BACKENDS, IndexMeta
from multiview_plugin.search import FaissStore, MultiVectorSearcher, SearchBackend, build_index
from multiview_plugin.search.aggregators import MaxAggregator

DIM = 8


def _corpus(tmp_path, n_docs=60, seed=0):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, n_docs)
    reps = (rng.standard_normal((n_docs, 1, DIM)) + 1.5 * rng.standard_normal((n_docs, 5, DIM))).astype(np.float32)
    mask = np.arange(5)[None, :] < counts[:, None]
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0)
    w = ShardWriter(tmp_path / "corpus.0.pkl", info, multi_vector=True)
    w.add([f"d{i}" for i in range(n_docs)], reps, mask)
    w.close()
    return [tmp_path / "corpus.0.pkl"], reps, mask


def _qdrant_backend():
    pytest.importorskip("qdrant_client")
    from multiview_plugin.search import _qdrant

    return _qdrant


def test_every_backend_class_implements_the_interface():
    _qdrant = _qdrant_backend()
    backends = set(SearchBackend.__subclasses__())
    assert {FaissStore, _qdrant.QdrantStore} <= backends
    kinds = set()
    for cls in backends:
        if not cls.__module__.startswith("multiview_plugin."):
            continue  # test doubles
        assert not inspect.isabstract(cls), f"{cls.__name__} leaves {sorted(cls.__abstractmethods__)} unimplemented"
        assert isinstance(cls.kind, str)
        kinds.add(cls.kind)
    assert sorted(kinds) == sorted(BACKENDS)  # one backend class per "backend" value multiview.json may hold


@pytest.mark.parametrize("backend", ["faiss", "qdrant"])
def test_each_backend_serves_the_declared_members(tmp_path, backend):
    """Documents, doc_vectors, kind and calibration read the same through the interface on both backends."""
    paths, reps, mask = _corpus(tmp_path)
    if backend == "qdrant":
        _qdrant = _qdrant_backend()
        _qdrant.build_qdrant_index(paths, tmp_path / "idx")
    else:
        build_index(paths, tmp_path / "idx", index_factory="HNSW8")
    try:
        searcher = MultiVectorSearcher(tmp_path / "idx")
        store = searcher.store
        assert isinstance(store, SearchBackend)
        assert store.kind == IndexMeta.load(tmp_path / "idx").backend == backend
        assert store.docids.tolist() == [f"d{i}" for i in range(len(reps))]
        assert store.doc_views.tolist() == mask.sum(1).tolist()
        assert store.row_doc.tolist() == np.repeat(np.arange(len(reps)), mask.sum(1)).tolist()
        assert store.doc_start.tolist() == np.concatenate([[0], np.cumsum(mask.sum(1))[:-1]]).tolist()
        assert store.mean_views == pytest.approx(mask.sum() / len(reps)) and store.dim == DIM
        for doc in (0, 7, len(reps) - 1):
            np.testing.assert_allclose(store.doc_vectors(doc), reps[doc][mask[doc]], rtol=1e-5, atol=1e-5)
        kind, knobs = store.calibration_grid()
        assert kind == ("qdrant" if backend == "qdrant" else "hnsw") and knobs
        for name, values in knobs.items():  # every knob calibration walks can be set
            store.set_search_knob(name, values[0])
        with pytest.raises(ConfigError, match="no search knob 'beam'"):
            store.set_search_knob("beam", 1)
        doc, score = store.search(reps[:3, 0], 5, MaxAggregator())
        assert doc.shape == score.shape == (3, 5) and (doc >= 0).all()
        ids, _ = store.search_docids(reps[:3, 0], 5, MaxAggregator())
        assert ids.tolist() == store.docids[doc].tolist()
    finally:
        if backend == "qdrant":
            _qdrant.close_embedded()


def test_exact_backends_have_nothing_to_calibrate(tmp_path):
    paths, _, _ = _corpus(tmp_path)
    build_index(paths, tmp_path / "flat")
    assert MultiVectorSearcher(tmp_path / "flat").store.calibration_grid() is None
    _qdrant = _qdrant_backend()
    try:
        _qdrant.build_qdrant_index(paths, tmp_path / "qd")
        assert MultiVectorSearcher(tmp_path / "qd", exact=True).store.calibration_grid() is None
    finally:
        _qdrant.close_embedded()


def test_search_knobs_change_the_search(tmp_path):
    """set_search_knob reaches what each backend searches with (the calibrated settings go through it)."""
    paths, _, _ = _corpus(tmp_path)
    build_index(paths, tmp_path / "hnsw", index_factory="HNSW8")
    store = MultiVectorSearcher(tmp_path / "hnsw").store
    store.set_search_knob("ef_search", 123)
    store.set_search_knob("overfetch", 0.5)
    assert (store.approximate.ef_search, store.approximate.overfetch) == (123, 0.5)
    _qdrant = _qdrant_backend()
    try:
        _qdrant.build_qdrant_index(paths, tmp_path / "qd")
        qd = MultiVectorSearcher(tmp_path / "qd").store
        qd.set_search_knob("ef_search", 77)
        qd.set_search_knob("min_doc_candidates", 3)
        assert (qd.hnsw_ef, qd.min_doc_candidates, qd.candidates(1)) == (77, 3, 3)
    finally:
        _qdrant.close_embedded()


def _backend_probes(source: str) -> list[str]:
    """getattr/hasattr calls whose object is a store or backend (``store``, ``self.store``, ``backend`` ...)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and node.args):
            target = ast.unparse(node.args[0]).lower()
            if "store" in target or "backend" in target:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_caller_probes_a_backend_with_getattr():
    """What callers need from a backend is declared on SearchBackend; probing attributes (``getattr(store,
    "settings", None)`` to tell Qdrant apart) hides what the interface lacks."""
    assert _backend_probes('if getattr(store, "settings", None) is not None: pass\nhasattr(self.store, "index")')
    root = Path(multiview_plugin.__file__).parent
    probes = {str(p.relative_to(root)): hits for p in sorted(root.rglob("*.py"))
              if (hits := _backend_probes(p.read_text(encoding="utf-8")))}
    assert not probes, probes


def test_order_ties_ranks_by_score_then_docid_padding_last():
    from multiview_plugin.search._backend import order_ties

    ids = np.array([["b", "a", None, "c"], ["z", "y", "x", None]], dtype=object)
    scores = np.array([[1.0, 1.0, -np.inf, 2.0], [0.5, 0.5, 0.5, -np.inf]], dtype=np.float32)
    got_ids, got_scores = order_ties(ids, scores)
    assert got_ids.tolist() == [["c", "a", "b", None], ["x", "y", "z", None]]
    assert got_scores.tolist() == [[2.0, 1.0, 1.0, -np.inf], [0.5, 0.5, 0.5, -np.inf]]
    ranked = np.array([["b", "a", "c"]], dtype=object)  # strictly descending: already in order, returned as is
    assert order_ties(ranked, np.array([[3.0, 2.0, 1.0]], np.float32))[0].tolist() == [["b", "a", "c"]]


def _tied_shards(tmp_path):
    """3 shards of 40 documents; the last shard's documents are copies of the first's under docids that sort
    before theirs (`a…` against `m…`), written after them: an exact tie where row order and docid order disagree."""
    rng = np.random.default_rng(11)
    reps = rng.standard_normal((120, 3, DIM)).astype(np.float32)
    mask = np.ones((120, 3), bool)
    reps[:40] *= 3  # the copied documents win the queries made of their views
    reps[80:], ids = reps[:40], [f"m{i:03d}" for i in range(80)] + [f"a{i:03d}" for i in range(40)]
    paths = []
    for s in range(3):
        info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=3, source="corpus.jsonl")
        w = ShardWriter(tmp_path / f"corpus.{s}.pkl", info, multi_vector=True)
        w.add(ids[40 * s:40 * s + 40], reps[40 * s:40 * s + 40], mask[40 * s:40 * s + 40])
        w.close()
        paths.append(tmp_path / f"corpus.{s}.pkl")
    q = rng.standard_normal((12, DIM)).astype(np.float32)
    q[:4] = reps[:4, 0]  # a certain tie at the top
    return paths, q


@pytest.mark.parametrize("k", [1, 7, 40])
def test_ties_break_by_docid_on_every_search_path(tmp_path, k):
    """Equal scores were ordered by where each path found the documents: one index put the higher row first, the
    shard merge the later shard's document, Qdrant its own order. Now every path ranks by score, then docid,
    also where a tie straddles the cut-off at k (k=1: the tied top pair keeps its smaller docid)."""
    from multiview_plugin.search._searcher import search_shards
    from multiview_plugin.search.sharded import ShardedSearcher

    paths, q = _tied_shards(tmp_path)
    build_index(paths, tmp_path / "all")
    for s, path in enumerate(paths):
        build_index([path], tmp_path / f"shard{s}", allow_partial=True)
    runs = {"one index": MultiVectorSearcher(tmp_path / "all").search_vectors(q, k),
            "--shard_search": search_shards(q, paths, k),
            "ShardedSearcher": ShardedSearcher([tmp_path / f"shard{s}" for s in (2, 0, 1)]).search_vectors(q, k)}
    from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded

    for engine, module in (("client", "qdrant_client"), ("edge", "qdrant_edge")):
        if _importable(module):
            build_qdrant_index(paths, tmp_path / f"qdrant-{engine}", engine=engine)
            searcher = MultiVectorSearcher(tmp_path / f"qdrant-{engine}", exact=True)
            runs[f"Qdrant {engine}"] = searcher.search_vectors(q, k)
    close_embedded()
    ids, scores = runs["one index"]
    for row_ids, row_scores in zip(ids, scores):
        keys = list(zip((-row_scores).tolist(), row_ids.tolist()))
        assert keys == sorted(keys)  # score descending, then docid ascending
    # by construction: the first document is the smallest docid among those with the best score (brute force)
    reps = np.concatenate([read_shard(p)[0].reshape(-1, 3, DIM) for p in paths])
    names = [d.split("#")[0] for p in paths for d in read_shard(p)[1][::3]]
    best = np.einsum("qd,nvd->qnv", q, reps).max(-1)
    top = [sorted(n for n, b in zip(names, row) if b == row.max()) for row in best]
    assert sum(len(t) > 1 for t in top) >= 3  # the data ties at the top
    assert ids[:, 0].tolist() == [t[0] for t in top]
    for name, (got_ids, got_scores) in runs.items():
        assert got_ids.tolist() == ids.tolist(), name
        np.testing.assert_allclose(got_scores, scores, rtol=1e-5, atol=1e-5, err_msg=name)


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
