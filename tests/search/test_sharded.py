"""Sharded search (multiview_plugin.search.sharded): K shard indexes built by driver.index, searched as one, in
process or as Ray actors on a loopback cluster; ranks identical to one Flat index over all shards (ties
included), also after an actor is killed and after a worker node is lost, or one line naming the lost shard."""

import json
import logging
import shutil
from pathlib import Path

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from multiview_plugin.driver import index as index_driver
from multiview_plugin.driver import search as search_driver
from multiview_plugin.encoding.shards import ShardFormatError, ShardInfo, ShardWriter
from multiview_plugin.errors import ConfigError
from multiview_plugin.search import MultiVectorSearcher
from multiview_plugin.search._searcher import merge_topk
from multiview_plugin.search.sharded import ShardedSearcher

DIM, N_DOCS, SHARDS = 16, 240, 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """4 encoded shards (1-4 views per document; documents 200..219 are copies of 0..19 under other docids, so
    their scores tie exactly), one Flat index over all, one Flat index per shard, and 30 encoded queries."""
    root = tmp_path_factory.mktemp("sharded")
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 5, N_DOCS)
    reps = rng.standard_normal((N_DOCS, 4, DIM)).astype(np.float32)
    reps[200:220], counts[200:220] = reps[0:20], counts[0:20]
    mask = np.arange(4)[None, :] < counts[:, None]
    bounds = np.linspace(0, N_DOCS, SHARDS + 1).astype(int)
    for s in range(SHARDS):
        info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=SHARDS, source="corpus.jsonl")
        w = ShardWriter(root / f"corpus.{s}.pkl", info, multi_vector=True)
        a, b = bounds[s], bounds[s + 1]
        w.add([f"doc{i}" for i in range(a, b)], reps[a:b], mask[a:b])
        w.close()
    q = rng.standard_normal((30, DIM)).astype(np.float32)
    q[:5] = reps[:5, 0]  # queries equal to a view of a duplicated document: a certain tie at the top
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     is_query=True)
    w = ShardWriter(root / "queries.pkl", info, multi_vector=False)
    w.add([f"q{i}" for i in range(len(q))], q)
    w.close()
    assert index_driver.main(["--passage_reps", str(root / "corpus.*.pkl"), "--index_dir", str(root / "all")]) == 0
    for s in range(SHARDS):
        assert index_driver.main(["--passage_reps", str(root / f"corpus.{s}.pkl"), "--index_dir",
                                  str(root / f"shard{s}"), "--allow_partial"]) == 0
    return root, q, [str(root / f"shard{s}") for s in range(SHARDS)]


def single(root, q, k):
    return MultiVectorSearcher(root / "all").search_vectors(q, k)


def run_lines(path):
    return [line.split() for line in path.read_text().splitlines()]


@pytest.mark.parametrize("k", [10, 60])
def test_in_process_merge_equals_one_flat_index_ties_included(built, k):
    root, q, dirs = built
    ids, scores = single(root, q, k)
    assert (scores[:, :-1] == scores[:, 1:]).any(), "the data must hold exact ties for this test to mean anything"
    got_ids, got_scores = ShardedSearcher(dirs).search_vectors(q, k)
    np.testing.assert_array_equal(got_scores, scores)
    assert got_ids.tolist() == ids.tolist()
    # the tie-break matters: a merge by score alone, ties to the later shard (the old rule), gives another order
    # than the single index; the rule (score, then docid) does not depend on the order the shards are given in
    parts = [MultiVectorSearcher(d).search_vectors(q, k) for d in reversed(dirs)]
    ids_rev = np.concatenate([p[0] for p in parts], axis=1)
    sc_rev = np.concatenate([p[1] for p in parts], axis=1)
    order = np.argsort(-sc_rev, axis=1, kind="stable")[:, :k]
    assert np.take_along_axis(ids_rev, order, axis=1).tolist() != ids.tolist()
    assert merge_topk(parts, k)[0].tolist() == ids.tolist()
    assert ShardedSearcher(dirs[::-1]).search_vectors(q, k)[0].tolist() == ids.tolist()


def test_python_api_hits_equal_the_single_searcher(built):
    root, q, dirs = built
    ref = MultiVectorSearcher(root / "all").batch_search(q, [f"q{i}" for i in range(len(q))], k=5)
    sharded = ShardedSearcher(",".join(dirs))
    assert sharded.batch_search(q, [f"q{i}" for i in range(len(q))], k=5) == ref
    assert sharded.search(q[3], k=5) == ref["q3"]
    assert sharded.num_docs == N_DOCS


def test_driver_in_process_equals_single_index(built, tmp_path):
    root, _, dirs = built
    common = ["--encoded_queries", str(root / "queries.pkl"), "--hits", "20"]
    assert search_driver.main(["--index", str(root / "all"), "--output", str(tmp_path / "one.trec"), *common]) == 0
    listing = tmp_path / "shards.txt"
    listing.write_text("".join(f"{d}\n" for d in dirs))
    for name, index in (("comma", ",".join(dirs)), ("file", f"@{listing}")):
        assert search_driver.main(["--index", index, "--output", str(tmp_path / f"{name}.trec"), *common]) == 0
        assert run_lines(tmp_path / f"{name}.trec") == run_lines(tmp_path / "one.trec")


def test_ann_shards_search_with_their_own_calibrated_settings(built, tmp_path):
    """HNSW shard indexes, each calibrated by driver.index at build time: each shard is searched with its own
    recorded settings, and the merged top-10 keeps >= 0.98 of one exact index's documents."""
    root, q, _ = built
    dirs = []
    for s in range(SHARDS):
        dirs.append(str(tmp_path / f"hnsw{s}"))
        assert index_driver.main(["--passage_reps", str(root / f"corpus.{s}.pkl"), "--index_dir", dirs[-1],
                                  "--allow_partial", "--index_factory", "HNSW8"]) == 0
    # one shard's recorded settings changed by hand: that shard, and only it, searches with them
    meta_path = tmp_path / "hnsw1" / "multiview.json"
    meta = json.loads(meta_path.read_text())
    meta["search_defaults"] = {**meta["search_defaults"], "overfetch": 3.0, "ef_search": 77}
    meta_path.write_text(json.dumps(meta))
    sharded = ShardedSearcher(dirs)
    for searcher, meta in zip(sharded._local, sharded.metas):
        assert meta.search_defaults, "driver.index calibrated each shard"
        assert searcher.store.approximate.overfetch == meta.search_defaults["overfetch"]
        assert searcher.store.approximate.ef_search == meta.search_defaults["ef_search"]
    assert [s.store.approximate.ef_search == 77 for s in sharded._local] == [False, True, False, False]
    exact, _ = single(root, q, 10)
    got, _ = sharded.search_vectors(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact.tolist(), got.tolist())])
    assert recall >= 0.98


def test_refusals(built, capsys):
    root, _, dirs = built
    with pytest.raises(ShardFormatError, match="shard.s. 3 of 4"):
        ShardedSearcher(dirs[:3])  # one shard index missing: the corpus would be searched in part
    assert ShardedSearcher(dirs[:3], allow_partial=True).num_docs == 180
    with pytest.raises(ConfigError, match="given twice"):
        ShardedSearcher([dirs[0], dirs[0]])
    with pytest.raises(ConfigError, match="hasans aggregation"):
        ShardedSearcher(dirs, aggregation="hasans")
    queries = ["--encoded_queries", str(root / "queries.pkl"), "--output", str(root / "x.trec")]
    for flags, needle in (([",".join(dirs), "--explain", str(root / "x.jsonl")], "error: --explain"),
                          ([",".join(dirs), "--ray_shards_per_actor", "2"], "error: --ray_shards_per_actor configures"),
                          # given at its default value, a flag is still given: it would do nothing, so it is refused
                          ([",".join(dirs), "--ray_max_restarts", "3"], "error: --ray_max_restarts configures"),
                          ([dirs[0], "--ray_timeout", "600"], "error: --ray_* flags configure a sharded search"),
                          ([dirs[0], "--ray_timeout", "5"], "error: --ray_* flags configure a sharded search")):
        rc = search_driver.main(["--index", *flags, *queries])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith(needle), err
    assert not (root / "x.trec").exists()


def test_ray_address_without_ray_is_a_config_error(built, monkeypatch):
    import sys

    _, _, dirs = built
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ConfigError, match="needs Ray, which is not installed"):
        ShardedSearcher(dirs, ray_address="auto")


@pytest.fixture(scope="module")
def encoded_shards(mvr_index, tmp_path_factory):
    """The tiny mvr model's TOPICS corpus encoded in 2 shards, one index per shard (the single index over all:
    ``mvr_index["index"]``)."""
    from multiview_plugin.driver.encode import main as encode_main

    root = tmp_path_factory.mktemp("encoder_shards")
    dirs = []
    for i in range(2):
        assert encode_main(["--model_name_or_path", str(mvr_index["model"]), "--dataset_path",
                            str(mvr_index["corpus"]), "--dataset_number_of_shards", "2", "--dataset_shard_index",
                            str(i), "--encode_output_path", str(root / f"c.{i}.pkl")]) == 0
        dirs.append(str(root / f"s{i}"))
        assert index_driver.main(["--passage_reps", str(root / f"c.{i}.pkl"), "--index_dir", dirs[-1],
                                  "--allow_partial"]) == 0
    return mvr_index, dirs


def test_sharded_search_with_a_query_encoder_equals_one_index(encoded_shards, tmp_path):
    """Before: any sharded search given a query encoder (driver --topics --encoder, ShardedSearcher(dirs, model))
    failed with `ImportError: cannot import name 'load_encoder'`. Now: the driver's run, ShardedSearcher with a
    model folder and with the Python API's loaded encoder all equal the single index's."""
    from multiview_plugin.api import MultiViewModel

    mvr, dirs = encoded_shards
    common = ["--topics", str(mvr["queries"]), "--encoder", str(mvr["model"]), "--hits", "8"]
    assert search_driver.main(["--index", str(mvr["index"]), "--output", str(tmp_path / "one.trec"), *common]) == 0
    assert search_driver.main(["--index", ",".join(dirs), "--output", str(tmp_path / "sharded.trec"), *common]) == 0
    assert run_lines(tmp_path / "sharded.trec") == run_lines(tmp_path / "one.trec")
    assert len(run_lines(tmp_path / "one.trec")) == 8 * 8
    single_searcher = MultiVectorSearcher(mvr["index"], mvr["model"], device="cpu")
    ref = single_searcher.search("what is paris", k=8)
    assert ShardedSearcher(dirs, mvr["model"], device="cpu").search("what is paris", k=8) == ref
    model = MultiViewModel.load(mvr["model"], device="cpu")
    with ShardedSearcher(dirs, model.encoder, device="cpu") as searcher:
        assert searcher.search("what is paris", k=8) == ref
        assert searcher.batch_search(["what is rome"], ["q"], k=3) == {"q": single_searcher.search("what is rome",
                                                                                                   k=3)}


def test_driver_ray_address_local_with_text_queries_ignores_RAY_ADDRESS(encoded_shards, tmp_path):
    """`driver.search --index a,b --topics --encoder --ray_address local` in a fresh process whose RAY_ADDRESS names
    a closed port: a new loopback instance serves the shards (before, `local` followed RAY_ADDRESS and hung), the
    run equals the single index's."""
    import os
    import subprocess
    import sys

    from multiview_plugin.ray_runtime import free_port

    pytest.importorskip("ray")
    mvr, dirs = encoded_shards
    common = ["--topics", str(mvr["queries"]), "--encoder", str(mvr["model"]), "--hits", "8"]
    assert search_driver.main(["--index", str(mvr["index"]), "--output", str(tmp_path / "one.trec"), *common]) == 0
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{free_port()}", "PYTHONPATH": os.getcwd(), "TQDM_DISABLE": "1"}
    out = subprocess.run([sys.executable, "-m", "multiview_plugin.driver.search", "--index", ",".join(dirs),
                          "--output", str(tmp_path / "local.trec"), *common, "--ray_address", "local"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert run_lines(tmp_path / "local.trec") == run_lines(tmp_path / "one.trec")


@pytest.mark.parametrize(("flag", "value"), [(f, v) for f in ("--ray_cpus_per_actor", "--ray_timeout")
                                               for v in ("nan", "inf", "-1", "0")]
                         + [("--ray_shards_per_actor", "0"), ("--ray_max_restarts", "-1")])
def test_ray_flags_must_be_finite_and_in_range_before_ray_starts(built, capsys, flag, value):
    """Before: `--ray_cpus_per_actor nan` / `--ray_timeout nan` ended in a ValueError traceback inside Ray (the
    integer flags' nan / inf are refused by argparse itself)."""
    root, _, dirs = built
    rc = search_driver.main(["--index", ",".join(dirs), "--encoded_queries", str(root / "queries.pkl"), "--output",
                             str(root / "x.trec"), "--ray_address", "127.0.0.1:1", flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {flag} must be a finite number "), err
    assert not (root / "x.trec").exists()


def test_driver_unreachable_ray_address_is_one_line_in_seconds(built, capsys):
    """Before: nothing listening at --ray_address gave Ray's connection warnings until an outer timeout."""
    import time

    from multiview_plugin.ray_runtime import free_port

    pytest.importorskip("ray")
    root, _, dirs = built
    port = free_port()
    start = time.monotonic()
    rc = search_driver.main(["--index", ",".join(dirs), "--encoded_queries", str(root / "queries.pkl"), "--output",
                             str(root / "x.trec"), "--ray_address", f"127.0.0.1:{port}"])
    assert time.monotonic() - start < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: --ray_address 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} ")
    assert not (root / "x.trec").exists()


# -- on a Ray cluster -----------------------------------------------------------------------------------------


def test_ray_cluster_listens_on_loopback_only(ray_cluster):
    """Every socket the test cluster's processes listen on is a loopback address (Ray rewrote 127.0.0.1 to the
    host's interface address before, and listened on all interfaces)."""
    import os

    from tests.conftest import is_loopback, listening_addresses

    psutil = pytest.importorskip("psutil")
    pids = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    sockets = listening_addresses(pids)
    assert sockets and all(is_loopback(ip) for ip, _ in sockets), sockets
    assert ray_cluster.address.startswith("127.0.0.1:")


def test_too_few_cpus_for_the_shard_actors_fails_at_once(built, ray_cluster, capsys):
    """Before: 4 shard actors that the cluster's CPUs cannot hold waited silently for --ray_timeout (600 s), then
    blamed a lost node. Now: one line at once saying what is needed."""
    import time

    root, _, dirs = built
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"^4 shard actors need 12 CPUs and 0 GPUs, the Ray cluster has 4 CPUs "):
        ShardedSearcher(dirs, ray_address=ray_cluster.address, cpus_per_actor=3)
    rc = search_driver.main(["--index", ",".join(dirs), "--encoded_queries", str(root / "queries.pkl"), "--output",
                             str(root / "x.trec"), "--ray_address", ray_cluster.address, "--ray_cpus_per_actor", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: 4 shard actors need 8 CPUs"), err
    assert time.monotonic() - start < 30 and not (root / "x.trec").exists()


def test_ray_sharded_search_with_a_query_encoder(encoded_shards, ray_cluster, tmp_path):
    """driver.search --index a,b --topics --encoder --ray_address: the queries are encoded in the driver, the
    shards searched by Ray actors; the run equals the single index's."""
    mvr, dirs = encoded_shards
    common = ["--topics", str(mvr["queries"]), "--encoder", str(mvr["model"]), "--hits", "8"]
    assert search_driver.main(["--index", str(mvr["index"]), "--output", str(tmp_path / "one.trec"), *common]) == 0
    assert search_driver.main(["--index", ",".join(dirs), "--output", str(tmp_path / "ray.trec"), *common,
                               "--ray_address", ray_cluster.address]) == 0
    assert run_lines(tmp_path / "ray.trec") == run_lines(tmp_path / "one.trec")



def test_ray_driver_with_an_actor_killed_mid_run_equals_single_index(built, ray_cluster, tmp_path):
    """driver.search over Ray (4 shard actors), one query per batch; a shard actor's process is killed while the
    run goes on: Ray restarts it, the batch is retried, and the run file equals the single index's."""
    import os
    import signal
    import threading
    import time

    psutil = pytest.importorskip("psutil")
    root, _, dirs = built
    common = ["--encoded_queries", str(root / "queries.pkl"), "--hits", "20", "--batch_size", "1"]
    assert search_driver.main(["--index", str(root / "all"), "--output", str(tmp_path / "one.trec"), *common]) == 0
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", search_driver.main([
        "--index", ",".join(dirs), "--output", str(tmp_path / "ray.trec"), *common,
        "--ray_address", ray_cluster.address])))
    thread.start()
    killed, end = None, time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < end:
        for proc in psutil.Process(os.getpid()).children(recursive=True):
            try:
                if proc.cmdline()[:1] == ["ray::ShardServer.search"]:
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = proc.pid
                    break
            except psutil.Error:
                continue
        time.sleep(0.01)
    thread.join(180)
    assert killed is not None, "no shard actor was seen searching"
    assert result.get("rc") == 0
    assert run_lines(tmp_path / "ray.trec") == run_lines(tmp_path / "one.trec")


def test_ray_actor_killed_and_node_lost_give_identical_results(built, ray_cluster):
    import time

    import ray

    root, q, dirs = built
    ids, scores = single(root, q, 15)
    end = time.monotonic() + 60  # the earlier tests' actors have released their CPUs: both nodes are free
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < end:
        time.sleep(0.2)
    with ShardedSearcher(dirs, ray_address=ray_cluster.address, shards_per_actor=2, timeout=120) as searcher:
        assert len(searcher.actors) == 2 and searcher.actor_shards[1] == [str(__import__("os").path.abspath(d))
                                                                          for d in dirs[2:]]
        placement = searcher.placement()
        assert len(set(placement.values())) == 2, placement  # spread: one actor per worker node
        got = searcher.search_vectors(q, 15)
        assert got[0].tolist() == ids.tolist() and np.array_equal(got[1], scores)
        ray.kill(searcher.actors[0], no_restart=False)  # the process dies; Ray restarts it
        got = searcher.search_vectors(q, 15)
        assert got[0].tolist() == ids.tolist() and np.array_equal(got[1], scores)
        lost = placement[searcher.actor_shards[0][0]]
        node = next(n for n in ray_cluster.worker_nodes if n.node_id == lost)
        ray_cluster.remove_node(node, allow_graceful=False)
        try:
            got = searcher.search_vectors(q, 15)  # the actor is rescheduled on the surviving node
            assert got[0].tolist() == ids.tolist() and np.array_equal(got[1], scores)
            assert lost not in searcher.placement().values()
        finally:
            ray_cluster.add_node(num_cpus=2, object_store_memory=100 * 1024**2)
            ray_cluster.wait_for_nodes()


def test_ray_lost_shard_is_one_line_naming_it(built, ray_cluster):
    import ray

    from multiview_plugin.ray_runtime import WorkerLostError

    _, q, dirs = built
    with ShardedSearcher(dirs[:2], ray_address=ray_cluster.address, max_restarts=0, timeout=60,
                         allow_partial=True) as searcher:
        ray.kill(searcher.actors[1], no_restart=True)
        with pytest.raises(WorkerLostError) as err:
            searcher.search_vectors(q, 5)
    message = str(err.value)
    assert dirs[1] in message and "\n" not in message


@pytest.mark.parametrize("hits", ["5000000", str(10 ** 12)])
def test_driver_caps_hits_at_the_documents_of_all_shards(built, tmp_path, caplog, hits):
    """The single-index path capped --hits (and --hybrid_depth) at the documents searched; the sharded one passed them
    uncapped to every shard and to the merge (a (queries, 10**12) result array). Now: capped at the documents of
    all shards, with the log line, and the run equals the single index's."""
    root, _, dirs = built
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    common = ["--encoded_queries", str(root / "queries.pkl"), "--hits", hits, "--batch_size", "8"]
    assert search_driver.main(["--index", ",".join(dirs), "--output", str(tmp_path / "sharded.trec"), *common]) == 0
    assert f"--hits {hits} exceeds the {N_DOCS} documents searched" in caplog.text
    assert search_driver.main(["--index", str(root / "all"), "--output", str(tmp_path / "one.trec"), *common]) == 0
    lines = run_lines(tmp_path / "sharded.trec")
    assert len(lines) == 30 * N_DOCS
    assert lines == run_lines(tmp_path / "one.trec")


def test_driver_caps_hybrid_depth_at_the_documents_of_all_shards(built, tmp_path, caplog):
    root, _, dirs = built
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"docid": f"doc{i}", "text": f"{words[i % 8]} {words[i // 8 % 8]} doc"})
                              + "\n" for i in range(N_DOCS)))
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\t{words[i % 8]} {words[(i + 3) % 8]}\n" for i in range(30)))
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    common = ["--encoded_queries", str(root / "queries.pkl"), "--topics", str(topics), "--hybrid", "bm25",
              "--bm25_corpus", str(corpus), "--hits", "10", "--hybrid_depth", str(10 ** 12)]
    assert search_driver.main(["--index", ",".join(dirs), "--output", str(tmp_path / "sharded.trec"), *common]) == 0
    assert f"--hybrid_depth {10 ** 12} exceeds the {N_DOCS} documents searched" in caplog.text
    assert search_driver.main(["--index", str(root / "all"), "--output", str(tmp_path / "one.trec"), *common]) == 0
    lines = run_lines(tmp_path / "sharded.trec")
    assert len(lines) == 30 * 10
    assert lines == run_lines(tmp_path / "one.trec")


def test_driver_hybrid_refuses_a_bm25_corpus_a_shard_was_not_encoded_from(built, tmp_path, capsys):
    """The single-index path refused --bm25_corpus other than the encoded corpus; the sharded one fused BM25 over
    any corpus without a word. Now every shard's recorded corpus is checked, and the error names the shard."""
    import shutil

    from multiview_plugin.encoding.fingerprint import file_identity

    root, _, dirs = built
    corpus, other = tmp_path / "corpus.jsonl", tmp_path / "other.jsonl"
    corpus.write_text("".join(json.dumps({"docid": f"doc{i}", "text": f"word{i % 7} doc"}) + "\n"
                              for i in range(N_DOCS)))
    other.write_text(corpus.read_text().replace("doc\"", "page\""))  # same docids, other texts
    shards = []
    for s, d in enumerate(dirs):  # the shard indexes, recording the corpus they were encoded from
        shutil.copytree(d, tmp_path / f"shard{s}")
        meta_path = tmp_path / f"shard{s}" / "multiview.json"
        meta = json.loads(meta_path.read_text())
        source = corpus if s < SHARDS - 1 else other  # the last shard says it was encoded from another corpus
        meta["extra"]["input"] = {"identity": file_identity(source), "separator": None, "source": str(source)}
        meta_path.write_text(json.dumps(meta))
        shards.append(str(tmp_path / f"shard{s}"))
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\tword{i % 7}\n" for i in range(30)))
    common = ["--index", ",".join(shards), "--encoded_queries", str(root / "queries.pkl"), "--topics", str(topics),
              "--hybrid", "bm25", "--hits", "10"]
    for given, wrong in ((corpus, shards[-1]), (other, shards[0])):
        out = tmp_path / "run.trec"
        assert search_driver.main([*common, "--bm25_corpus", str(given), "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --bm25_corpus {given}: not the corpus index shard {wrong} was encoded from")
        assert err.count("\n") == 1 and not out.exists()
    meta_path = Path(shards[-1]) / "multiview.json"  # all shards from one corpus: it fuses
    meta = json.loads(meta_path.read_text())
    meta["extra"]["input"]["identity"] = file_identity(corpus)
    meta_path.write_text(json.dumps(meta))
    assert search_driver.main([*common, "--bm25_corpus", str(corpus), "--output", str(tmp_path / "ok.trec")]) == 0
    assert len(run_lines(tmp_path / "ok.trec")) == 30 * 10


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """Shard indexes whose encoded shards were moved away afterwards: s0, s1, s2 (disjoint), acopy (a copy of s0)
    and s01 (built from shards 0 and 1: it overlaps s0 and s1), with the documents' vectors for reference."""
    root = tmp_path_factory.mktemp("moved")
    emb = root / "emb"
    emb.mkdir()
    rng = np.random.default_rng(7)
    reps = rng.standard_normal((30, 2, DIM)).astype(np.float32)
    for s in range(3):
        info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=3, source="corpus.jsonl")
        w = ShardWriter(emb / f"corpus.{s}.pkl", info, multi_vector=True)
        w.add([f"doc{i}" for i in range(10 * s, 10 * s + 10)], reps[10 * s:10 * s + 10], np.ones((10, 2), bool))
        w.close()
    for name, shards in (("s0", [0]), ("s1", [1]), ("s2", [2]), ("s01", [0, 1])):
        assert index_driver.main(["--passage_reps", str(emb / f"corpus.[{''.join(map(str, shards))}].pkl"),
                                  "--index_dir", str(root / name), "--allow_partial"]) == 0
    shutil.copytree(root / "s0", root / "acopy")
    emb.rename(root / "moved-away")
    return root, reps


def test_an_index_listed_twice_is_refused_from_its_own_records(moved, capsys):
    """search --index a,acopy (a copy) after the encoded shards were moved away: exit 0, every docid twice per query,
    only a warning that the shard check could not run."""
    root, reps = moved
    with pytest.raises(ConfigError, match="same index"):
        ShardedSearcher([root / "s0", root / "acopy"])
    with pytest.raises(ConfigError, match="same index"):
        ShardedSearcher([root / "s0", root / "s1", str(root / "s1") + "/"])  # one folder under two names
    with pytest.raises(ConfigError, match="document 'doc1[0-9]' is in .*s1 and in .*s01"):
        ShardedSearcher([root / "s1", root / "s01"])  # overlapping, not identical
    q = np.random.default_rng(1).standard_normal((2, DIM)).astype(np.float32)
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     is_query=True)
    w = ShardWriter(root / "q.pkl", info, multi_vector=False)
    w.add(["q0", "q1"], q)
    w.close()
    capsys.readouterr()
    assert search_driver.main(["--index", f"{root / 's0'},{root / 'acopy'}", "--encoded_queries",
                               str(root / "q.pkl"), "--output", str(root / "x.trec")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --index: ") and "same index" in err[0], err
    assert not (root / "x.trec").exists()


@hypothesis.settings(max_examples=30, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(names=st.lists(st.sampled_from(["s0", "s1", "s2", "acopy", "s01"]), min_size=1, max_size=4,
                                 unique=True))
def test_any_index_list_is_refused_exactly_when_a_document_repeats(moved, names):
    """An index list is searched (each document once, ranked as brute force over their union) or refused in one
    ConfigError, and refused exactly when two of its indexes share a document."""
    root, reps = moved
    docs = {"s0": range(0, 10), "s1": range(10, 20), "s2": range(20, 30), "acopy": range(0, 10), "s01": range(20)}
    held = [d for n in names for d in docs[n]]
    try:
        searcher = ShardedSearcher([root / n for n in names], allow_partial=True)
    except ConfigError as err:
        assert len(held) != len(set(held)) and "\n" not in str(err)
        return
    assert len(held) == len(set(held))
    q = np.random.default_rng(2).standard_normal((3, DIM)).astype(np.float32)
    ids, scores = searcher.search_vectors(q, len(held))
    union = sorted(set(held))
    best = np.einsum("qd,nvd->qnv", q, reps[union]).max(-1)
    for row_ids, row_scores, want in zip(ids, scores, best):
        assert sorted(row_ids.tolist()) == sorted(f"doc{i}" for i in union)
        np.testing.assert_allclose(row_scores, np.sort(want)[::-1], rtol=1e-5, atol=1e-5)
