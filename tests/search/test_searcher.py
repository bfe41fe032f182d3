"""Shards, index and searcher: exact top-k against brute force, sharded merge, interop, bad inputs."""

import pickle

import faiss
import numpy as np
import pytest

from multiview_plugin.encoding.shards import ShardFormatError, ShardInfo, ShardWriter, read_shard
from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.search import FaissStore, MultiVectorSearcher, build_index, search_batched, search_shards
from multiview_plugin.search.aggregators import MaxAggregator

DIM = 16


def random_corpus(rng, n_docs, views):
    """docids, (N, K, D) reps and (N, K) mask; ``views`` an int (fixed) or (lo, hi) (variable)."""
    k_max = views if isinstance(views, int) else views[1]
    counts = np.full(n_docs, views) if isinstance(views, int) else rng.integers(views[0], views[1] + 1, n_docs)
    reps = rng.standard_normal((n_docs, k_max, DIM)).astype(np.float32)
    mask = np.arange(k_max)[None, :] < counts[:, None]
    return [f"doc{i}" for i in range(n_docs)], reps, mask


def write_shards(tmp_path, docids, reps, mask, n_shards, multi=True):
    bounds = np.linspace(0, len(docids), n_shards + 1).astype(int)
    paths = []
    for s in range(n_shards):
        a, b = bounds[s], bounds[s + 1]
        info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=n_shards)
        w = ShardWriter(tmp_path / f"corpus.{s}.pkl", info, multi_vector=multi)
        w.add(docids[a:b], reps[a:b], mask[a:b])
        w.close()
        paths.append(tmp_path / f"corpus.{s}.pkl")
    return paths


def brute_force(q, reps, mask, k):
    scores = np.einsum("qd,nkd->qnk", q, reps)
    scores = np.where(mask[None], scores, -np.inf).max(-1)
    order = np.argsort(-scores, axis=1)[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.mark.parametrize("views", [4, (1, 7)], ids=["fixed", "variable"])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_exact_top_k_matches_brute_force(tmp_path, views, k):
    rng = np.random.default_rng(0)
    docids, reps, mask = random_corpus(rng, 300, views)
    paths = write_shards(tmp_path, docids, reps, mask, 3)
    build_index(paths, tmp_path / "idx")
    searcher = MultiVectorSearcher(tmp_path / "idx")
    q = rng.standard_normal((25, DIM)).astype(np.float32)
    ids, scores = searcher.search_vectors(q, k)
    want_idx, want_scores = brute_force(q, reps, mask, k)
    assert ids.tolist() == [[docids[i] for i in row] for row in want_idx]
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
    # the Pyserini-style API returns the same
    hits = searcher.batch_search(q, [f"q{i}" for i in range(25)], k=k)
    assert [h.docid for h in hits["q3"]] == ids[3].tolist()
    assert hits["q3"][0].score == pytest.approx(float(scores[3, 0]), abs=1e-5)
    # sharded search merged equals the whole-index search
    s_ids, s_scores = search_shards(q, paths, k)
    assert s_ids.tolist() == ids.tolist()
    np.testing.assert_allclose(s_scores, scores, rtol=1e-5, atol=1e-5)


def test_no_queries_give_empty_answers(tmp_path):
    rng = np.random.default_rng(1)
    build_index(write_shards(tmp_path, *random_corpus(rng, 20, 3), 1), tmp_path / "idx")
    ids, scores = MultiVectorSearcher(tmp_path / "idx").search_vectors(np.zeros((0, DIM), np.float32), 5)
    assert ids.shape == scores.shape == (0, 5)


def test_non_finite_queries_are_refused_naming_their_rows(tmp_path):
    """A batch is checked in one call, then the bad rows named; huge finite values are searched."""
    from multiview_plugin.encoding.shards import NonFiniteVectorsError

    rng = np.random.default_rng(2)
    build_index(write_shards(tmp_path, *random_corpus(rng, 20, 3), 1), tmp_path / "idx")
    searcher = MultiVectorSearcher(tmp_path / "idx")
    q = np.zeros((3, DIM), np.float32)
    q[2, :2] = np.inf, -np.inf
    with pytest.raises(NonFiniteVectorsError, match=r"^1 query vectors .*\(rows \[2\]\)"):
        searcher.search_vectors(q, 3)
    with np.errstate(over="ignore"):  # finite values whose float32 sum overflows are searched, not refused
        assert searcher.search_vectors(np.full((1, DIM), 3e38, np.float32), 3)[0].shape == (1, 3)


@pytest.mark.parametrize("n_queries", [5, 30])  # Faiss searches below and above its BLAS threshold (20)
def test_shard_search_breaks_ties_as_one_index(tmp_path, n_queries):
    """``--shard_search`` (search_shards) merged equal scores with the earlier shard's document first: the opposite
    of one index over the same shards (Faiss: the higher row, the later shard's, first). Now the same order, docid
    for docid, the one rule of every path (score descending, then docid ascending): documents 90..119 (last shard)
    are copies of 0..29 (first shard) under other docids."""
    rng = np.random.default_rng(5)
    docids, reps, mask = random_corpus(rng, 120, (1, 3))
    reps[90:], mask[90:] = reps[:30], mask[:30]
    paths = write_shards(tmp_path, docids, reps, mask, 4)
    q = rng.standard_normal((n_queries, DIM)).astype(np.float32)
    q[:5] = reps[:5, 0]  # a certain tie at the top
    k = 40
    store = FaissStore.from_shards(paths)
    ids, scores = search_batched(store, q, k, MaxAggregator())
    assert (scores[:, :-1] == scores[:, 1:]).any(), "the data must hold exact ties"
    s_ids, s_scores = search_shards(q, paths, k)
    np.testing.assert_array_equal(s_scores, scores)
    assert s_ids.tolist() == ids.tolist()
    assert [d for d in ids[0, :2]] == ["doc0", "doc90"]  # the rule: equal scores, docid ascending


def test_widening_needed_for_variable_views():
    """One document owns the 40 best vectors: the first fetch (k x mean views) holds too few distinct docs."""
    rng = np.random.default_rng(1)
    q = np.ones((1, DIM), dtype=np.float32)
    greedy = np.ones((40, DIM), dtype=np.float32) + rng.random((40, DIM), dtype=np.float32)
    others = rng.standard_normal((60, DIM)).astype(np.float32) * 0.1
    index = faiss.IndexFlatIP(DIM)
    index.add(np.concatenate([greedy, others]))
    lookup = [f"big#{j}" for j in range(40)] + [f"d{i}#0" for i in range(60)]
    store = FaissStore.from_lookup(index, lookup, True, "test")
    doc, score = store.search(q, 5, MaxAggregator())
    got = store.docids[doc[0]].tolist()
    scores_others = others @ q[0]
    want = ["big"] + [f"d{i}" for i in np.argsort(-scores_others)[:4]]
    assert got == want


def test_k_larger_than_corpus_and_nested_new_index_dir(tmp_path):
    rng = np.random.default_rng(2)
    docids, reps, mask = random_corpus(rng, 5, 3)
    build_index(write_shards(tmp_path, docids, reps, mask, 1), tmp_path / "new" / "nested" / "idx")
    # no temp dir left beside it
    assert sorted(p.name for p in (tmp_path / "new" / "nested").iterdir()) == ["idx"]
    searcher = MultiVectorSearcher(tmp_path / "new" / "nested" / "idx")
    hits = searcher.search(rng.standard_normal(DIM).astype(np.float32), k=10)
    assert len(hits) == 5 and len({h.docid for h in hits}) == 5


def test_index_layout_reads_like_pyserini(tmp_path):
    """Pyserini's FaissSearcher: faiss.read_index(dir/index) and docids = lines of dir/docid, row by row."""
    rng = np.random.default_rng(3)
    docids, reps, mask = random_corpus(rng, 20, (1, 4))
    build_index(write_shards(tmp_path, docids, reps, mask, 2), tmp_path / "idx")
    index = faiss.read_index(str(tmp_path / "idx" / "index"))
    rows = (tmp_path / "idx" / "docid").read_text().splitlines()
    assert index.ntotal == len(rows) == int(mask.sum())
    expected = [f"{d}#{j}" for d, m in zip(docids, mask) for j in range(int(m.sum()))]
    assert rows == expected
    np.testing.assert_allclose(index.reconstruct(5), reps[mask][5])
    # Pyserini's --max-passage collapse over the raw hits gives our documents
    q = rng.standard_normal((1, DIM)).astype(np.float32)
    _, idx = index.search(q, index.ntotal)
    collapsed = []
    for i in idx[0]:
        d = rows[i].split("#")[0]
        if d not in collapsed:
            collapsed.append(d)
    ours = MultiVectorSearcher(tmp_path / "idx").search(q[0], k=10)
    assert [h.docid for h in ours] == collapsed[:10]


def test_single_vector_shard_is_tevatron_layout(tmp_path):
    rng = np.random.default_rng(4)
    docids, reps, mask = random_corpus(rng, 10, 1)
    (path,) = write_shards(tmp_path, docids, reps, mask, 1, multi=False)
    with open(path, "rb") as f:
        arr, lookup = pickle.load(f)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.shape == (10, DIM)
    assert lookup == docids
    build_index([path], tmp_path / "idx")
    assert (tmp_path / "idx" / "docid").read_text().splitlines() == docids


def test_shard_writer_resumes_and_never_exposes_partial_shards(tmp_path):
    rng = np.random.default_rng(5)
    docids, reps, mask = random_corpus(rng, 30, 3)
    info = lambda: ShardInfo(model_name="t", dim=0, views_per_doc=0, dtype="float32", num_items=0,  # noqa: E731
                             num_vectors=0)
    w = ShardWriter(tmp_path / "s.pkl", info(), True)
    w.add(docids[:10], reps[:10], mask[:10])
    w.checkpoint()
    w.add(docids[10:20], reps[10:20], mask[10:20])  # never checkpointed: lost in the "crash"
    del w
    assert not (tmp_path / "s.pkl").exists()  # nothing reads as complete
    w = ShardWriter(tmp_path / "s.pkl", info(), True)
    assert w.docs_done == 10
    w.add(docids[10:], reps[10:], mask[10:])
    w.close()
    arr, lookup, meta = read_shard(tmp_path / "s.pkl")
    assert lookup == [f"{d}#{j}" for d in docids for j in range(3)]
    np.testing.assert_array_equal(arr, reps.reshape(-1, DIM))
    assert meta.num_items == 30 and meta.views_per_doc == 3
    # the streamed pickle is byte-identical to pickling an ordinary (writable) array
    assert (tmp_path / "s.pkl").read_bytes() == pickle.dumps((reps.reshape(-1, DIM), lookup), protocol=5)
    assert arr.flags.writeable
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pkl", "s.pkl.json"]


def test_bad_inputs(tmp_path):
    rng = np.random.default_rng(6)
    docids, reps, mask = random_corpus(rng, 10, 2)
    paths = write_shards(tmp_path, docids, reps, mask, 2)
    with pytest.raises(ShardFormatError, match="does not exist"):
        build_index([tmp_path / "missing.pkl"], tmp_path / "x")
    with pytest.raises(MultiViewError, match="are both shard 0 of 2"):
        build_index([paths[0], paths[0]], tmp_path / "x")
    build_index(paths, tmp_path / "idx")
    with pytest.raises(ConfigError, match="already holds a multiview index"):
        build_index(paths, tmp_path / "idx")
    searcher = MultiVectorSearcher(tmp_path / "idx")
    with pytest.raises(ConfigError, match=r"query vectors have shape \(1, 7\), the index expects \(N, 16\)"):
        searcher.search(np.ones(7, dtype=np.float32))
    with pytest.raises(ConfigError, match="no query encoder"):
        searcher.search("a text query")
    (tmp_path / "trunc.pkl").write_bytes((tmp_path / "corpus.0.pkl").read_bytes()[:100])
    with pytest.raises(ShardFormatError, match="cannot unpickle"):
        read_shard(tmp_path / "trunc.pkl")


def test_multi_vector_layout_with_one_view_per_doc(tmp_path):
    """A multi-vector model's shard keeps docid#j lookups even if every document got one view (e.g. dcsr on
    one-sentence passages); index and searcher must still map rows back to plain docids."""
    rng = np.random.default_rng(3)
    docids, reps, mask = random_corpus(rng, 20, 1)
    paths = write_shards(tmp_path, docids, reps, mask, 2, multi=True)
    assert read_shard(paths[0])[1][0] == "doc0#0"
    build_index(paths, tmp_path / "idx")
    ids, _ = MultiVectorSearcher(tmp_path / "idx").search_vectors(reps[:3, 0], 1)
    assert ids[:, 0].tolist() == ["doc0", "doc1", "doc2"]
    store_ids, _ = FaissStore.from_shards(paths).search_docids(reps[:3, 0], 1, MaxAggregator())
    assert store_ids[:, 0].tolist() == ["doc0", "doc1", "doc2"]


@pytest.mark.parametrize("shard_search", [False, True], ids=["in_memory", "shard_search"])
def test_search_driver_batch_size_minus_one_is_one_batch(tmp_path, shard_search):
    """Tevatron's ``--batch_size -1`` means all queries in one batch (regression: it wrote an empty ranking)."""
    from multiview_plugin.driver.search import main as search_main

    rng = np.random.default_rng(7)
    docids, reps, mask = random_corpus(rng, 40, 3)
    write_shards(tmp_path, docids, reps, mask, 2)
    q = rng.standard_normal((5, DIM)).astype(np.float32)
    with open(tmp_path / "q.pkl", "wb") as f:
        pickle.dump((q, [f"q{i}" for i in range(5)]), f)
    runs = {}
    for batch_size in ("-1", "2"):
        out = tmp_path / f"run{batch_size}.txt"
        argv = ["--query_reps", str(tmp_path / "q.pkl"), "--passage_reps", str(tmp_path / "corpus.*.pkl"),
                "--depth", "4", "--batch_size", batch_size, "--save_ranking_to", str(out), "--save_text"]
        assert search_main(argv + (["--shard_search"] if shard_search else [])) == 0
        runs[batch_size] = out.read_text().splitlines()
    assert len(runs["-1"]) == 5 * 4
    assert runs["-1"] == runs["2"]
    want_idx, _ = brute_force(q, reps, mask, 4)
    assert [line.split("\t")[1] for line in runs["-1"][:4]] == [docids[i] for i in want_idx[0]]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_row_sims_score_every_row_as_a_plain_product(tmp_path, dtype):
    """The re-scoring kernel (_row_sims): q · store[r] for rows of any shape, repeated rows (the padding's row 0)
    and more rows than one block included, from a read-only memory map, equal to numpy's float32 product."""
    from multiview_plugin.search._searcher import _row_sims

    rng = np.random.default_rng(0)
    path = tmp_path / "store.npy"
    np.save(path, rng.standard_normal((500, 24)).astype(dtype))
    store = np.load(path, mmap_mode="r")
    rows = rng.integers(0, 500, (37, 8))
    rows[-1] = 0  # a padded candidate: row 0 for every view
    q = rng.standard_normal(24).astype(np.float32)
    got = _row_sims(store, rows, q, block=16)
    assert got.shape == rows.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, np.asarray(store, dtype=np.float32)[rows] @ q, rtol=1e-5, atol=1e-5)
