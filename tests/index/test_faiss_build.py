"""build_index(ivf_training="two_level") / driver.index --ivf_training: two-level k-means for IVF coarse centroids."""

import faiss
import numpy as np
import pytest

from multiview_plugin.driver import index as index_driver
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
from multiview_plugin.errors import ConfigError
from multiview_plugin.index.faiss_build import (
    construction_beam,
    hnsw_graphs,
    set_hnsw_construction,
    train_ivf_two_level,
)
from multiview_plugin.search import FaissStore, MultiVectorSearcher, build_index
from multiview_plugin.search.aggregators import MaxAggregator
from tools.synthetic_vectors import clustered_documents, clustered_queries

N_DOCS, VIEWS, DIM = 3000, 4, 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ivf2")
    docs = clustered_documents(N_DOCS, VIEWS, DIM, clusters=60, seed=5)
    info = ShardInfo(model_name="mvr", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0)
    writer = ShardWriter(folder / "corpus.0.pkl", info, multi_vector=True)
    writer.add([f"d{i}" for i in range(N_DOCS)], docs)
    writer.close()
    queries = clustered_queries(docs, 100, seed=6)
    flat = faiss.IndexFlatIP(DIM)
    flat.add(docs.reshape(-1, DIM))
    lookup = [f"d{i}#{j}" for i in range(N_DOCS) for j in range(VIEWS)]
    exact = FaissStore.from_lookup(flat, lookup, True, "exact").search(queries, 10, MaxAggregator())[0]
    return folder, docs, queries, exact


def _recall(searcher, queries, exact):
    ids = np.vectorize(lambda d: int(d[1:]))(searcher.search_vectors(queries, 10)[0])
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), exact.tolist())]))


def test_two_level_trains_every_list_and_keeps_recall(data, tmp_path):
    """The flag changes the centroids (not Faiss's flat k-means), fills all nlist lists of an HNSW quantiser,
    and the searched index keeps the recall of the flat-trained one."""
    folder, docs, queries, exact = data
    for training in ("flat", "two_level"):
        build_index([folder / "corpus.0.pkl"], tmp_path / training, index_factory="IVF64_HNSW32,SQ8",
                    train_size=64 * 39, ivf_training=training, aggregation="max", rescore_store="fp16")
    read = [faiss.read_index(str(tmp_path / t / "index")) for t in ("flat", "two_level")]  # kept: they own the IVFs
    flat_ivf, two_ivf = (faiss.extract_index_ivf(i) for i in read)
    assert two_ivf.quantizer.ntotal == flat_ivf.quantizer.ntotal == 64
    cents = [i.quantizer.reconstruct_n(0, 64) for i in (flat_ivf, two_ivf)]
    assert not np.allclose(cents[0], cents[1])  # a different training, not a no-op flag
    assert sum(two_ivf.invlists.list_size(i) > 0 for i in range(64)) >= 60  # the lists are used
    recalls = {t: _recall(MultiVectorSearcher(tmp_path / t, nprobe=16), queries, exact) for t in ("flat", "two_level")}
    assert recalls["two_level"] >= 0.95 and recalls["two_level"] >= recalls["flat"] - 0.03


def test_two_level_on_a_flat_quantiser_and_inner_product_centroids_are_unit():
    docs = clustered_documents(2000, 2, 16, clusters=30, seed=1).reshape(-1, 16)
    index = faiss.index_factory(16, "IVF100,Flat", faiss.METRIC_INNER_PRODUCT)
    train_ivf_two_level(index, docs, "IVF100,Flat")
    ivf = faiss.extract_index_ivf(index)
    assert index.is_trained and ivf.quantizer.ntotal == 100
    cent = ivf.quantizer.reconstruct_n(0, 100)
    assert np.allclose(np.linalg.norm(cent, axis=1), 1.0, atol=1e-4)  # spherical, as Faiss trains IP indexes


def test_two_level_refusals(data, tmp_path):
    folder = data[0]
    with pytest.raises(ConfigError, match="not a plain IVF index"):
        build_index([folder / "corpus.0.pkl"], tmp_path / "hnsw", index_factory="HNSW32", ivf_training="two_level")
    with pytest.raises(ConfigError, match="ivf_training 'kmeans'"):
        build_index([folder / "corpus.0.pkl"], tmp_path / "x", index_factory="IVF16,Flat", ivf_training="kmeans")
    with pytest.raises(ConfigError, match="trains on the CPU"):
        build_index([folder / "corpus.0.pkl"], tmp_path / "g", index_factory="IVF16,Flat", ivf_training="two_level",
                    use_gpu=True)
    with pytest.raises(ConfigError, match="cannot train 64 lists on the 10"):
        train_ivf_two_level(faiss.index_factory(DIM, "IVF64,Flat", faiss.METRIC_INNER_PRODUCT),
                            np.ones((10, DIM), dtype=np.float32), "IVF64,Flat")
    assert not (tmp_path / "hnsw").exists() and not (tmp_path / "g").exists()


def test_driver_flag_reaches_the_builder(data, tmp_path, monkeypatch):
    seen = {}
    from multiview_plugin.index import build

    real = build.build_index

    def spy(shards, index_dir, config=None, **k):
        seen.update(vars(build.IndexConfig.of(config, k)))
        return real(shards, index_dir, config, **k)

    monkeypatch.setattr(build, "build_index", spy)
    assert index_driver.main(["--passage_reps", str(data[0] / "corpus.*.pkl"), "--index_dir", str(tmp_path / "i"),
                              "--index_factory", "IVF16,SQ8", "--ivf_training", "two_level", "--train_size", "2000",
                              "--target_recall", "0"]) == 0
    assert seen["ivf_training"] == "two_level"


def test_second_level_runs_in_parallel_with_the_serial_centroids(monkeypatch):
    """issue 38: the second level of two-level k-means was a serial Python loop (one small k-means per first-level
    cluster). Now the clusters are split by several threads at once (Faiss releases the GIL), and the trained
    quantiser is the serial loop's, bit for bit."""
    import concurrent.futures

    x = clustered_documents(6000, 1, 24, clusters=40, seed=4)[:, 0].copy()
    quantisers = {}
    pools = []
    omp = faiss.omp_get_max_threads()
    real_pool = concurrent.futures.ThreadPoolExecutor
    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", lambda n: pools.append(n) or real_pool(n))
    for threads in (1, 2, 3):
        index = faiss.index_factory(24, "IVF256,Flat", faiss.METRIC_INNER_PRODUCT)
        train_ivf_two_level(index, x, "IVF256,Flat", seed=3, threads=threads)
        quantisers[threads] = faiss.downcast_index(index.quantizer).reconstruct_n(0, 256)
    assert pools == [2, 3]  # the serial run made no pool
    assert np.array_equal(quantisers[1], quantisers[2]) and np.array_equal(quantisers[1], quantisers[3])
    assert faiss.omp_get_max_threads() == omp  # each k-means ran on one OpenMP thread in the pool, then restored


@pytest.mark.parametrize("factory, graphs, over_rows", [
    ("HNSW8", 1, 1), ("HNSW8,SQ8", 1, 1), ("IVF16_HNSW8,Flat", 1, 0), ("PCA8,HNSW8", 1, 1),
    ("HNSW8,Flat,Refine(Flat)", 1, 1), ("Flat", 0, 0), ("IVF16,Flat", 0, 0), ("IVF16,PQ4", 0, 0)])
def test_hnsw_graphs_finds_each_graph_of_a_factory(factory, graphs, over_rows):
    """Every graph; with ``quantisers=False`` only one over the index's own rows (the searcher's beam)."""
    index = faiss.index_factory(16, factory, faiss.METRIC_INNER_PRODUCT)
    assert len(hnsw_graphs(index)) == graphs
    assert len(hnsw_graphs(index, quantisers=False)) == over_rows
    if graphs:
        set_hnsw_construction([index, None], 123, factory)
        assert construction_beam([index]) == 123
    else:
        assert construction_beam([index, None]) is None
        with pytest.raises(ConfigError, match="has no HNSW graph"):
            set_hnsw_construction([index], 123, factory)
