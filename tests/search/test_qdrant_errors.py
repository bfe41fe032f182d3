"""What goes wrong around a Qdrant collection is one `error:` line, never a traceback, and leaves nothing behind:
a server that is not there, not Qdrant, too slow or refusing the key; a storage folder that is not Qdrant's or is
held by another process; a resume over shards that changed since; the client left for the interpreter to close.
And ``--report`` counts the storage on disk."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qdrant_client")

from multiview_plugin.driver import index as index_driver  # noqa: E402
from multiview_plugin.driver import search as search_driver  # noqa: E402
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter  # noqa: E402
from multiview_plugin.errors import ConfigError  # noqa: E402
from multiview_plugin.search import _qdrant  # noqa: E402
from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded  # noqa: E402
from multiview_plugin.search.report import index_report  # noqa: E402
from tests.conftest import without_progress_bars  # noqa: E402
from tests.search.test_qdrant import DIM, corpus, write_shards  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _release():
    yield
    close_embedded()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """A tiny HTTP server on 127.0.0.1 answering every request with ``status``/``body`` after ``delay`` s."""

    def __init__(self, status=200, body=b"<html>hello</html>", delay=0.0, content_type="text/html"):
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                time.sleep(delay)
                outer.requests.append((self.command, self.path))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (the timeout test): nothing to answer
                    pass

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _answer

            def log_message(self, *args):
                pass

        self.requests: list = []
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, client_address: None  # never print into another test's stderr
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def shards(tmp_path):
    docids, reps, mask = corpus(30)
    write_shards(tmp_path, docids, reps, mask, 2)
    return str(tmp_path / "corpus.*.pkl")


def one_error_line(err: str) -> str:
    lines = [line for line in without_progress_bars(err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def build(shards, index_dir, url, *extra):
    return index_driver.main(["--passage_reps", shards, "--index_dir", str(index_dir), "--backend", "qdrant",
                              "--qdrant_url", url, "--target_recall", "0", *extra])


def test_connection_refused_is_one_line_and_no_folder(tmp_path, shards, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert build(shards, tmp_path / "idx", url) == 2
    line = one_error_line(capsys.readouterr().err)
    assert url in line and "cannot connect" in line and "Qdrant server" in line
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("status, body, expect", [
    (404, b"Not Found", "HTTP 404 Not Found for Qdrant's API: not a Qdrant server"),
    (200, b"<html>a web page</html>", "the answer is not a Qdrant server's"),
    (401, b"Unauthorized", "expected a valid API key in $QDRANT_API_KEY"),
    (403, b"Forbidden", "HTTP 403"),
    (500, b"boom", "HTTP 500"),
])
def test_non_qdrant_or_refusing_server_is_one_line_and_no_folder(tmp_path, shards, capsys, status, body, expect):
    with _Server(status, body) as server:
        assert build(shards, tmp_path / "idx", server.url) == 2
    line = one_error_line(capsys.readouterr().err)
    assert server.url in line and expect in line
    assert not (tmp_path / "idx").exists()
    assert server.requests and all(method == "GET" for method, _ in server.requests)  # nothing was written


def test_json_server_that_is_not_qdrant(tmp_path, shards, capsys):
    with _Server(200, json.dumps({"title": "elasticsearch", "version": "8"}).encode(),
                 content_type="application/json") as server:
        assert build(shards, tmp_path / "idx", server.url) == 2
    assert "calls itself 'elasticsearch', not Qdrant" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "idx").exists()


def test_timeout_is_one_line_and_no_folder(tmp_path, shards, capsys):
    with _Server(200, b"{}", delay=3.0) as server:
        start = time.perf_counter()
        assert build(shards, tmp_path / "idx", server.url, "--qdrant_timeout", "1") == 2
        assert time.perf_counter() - start < 3.0  # --qdrant_timeout took effect
    line = one_error_line(capsys.readouterr().err)
    assert "no answer within 1 s" in line and server.url in line
    assert not (tmp_path / "idx").exists()


def test_search_against_a_dead_server_is_one_line(tmp_path, shards, capsys):
    assert index_driver.main(["--passage_reps", shards, "--index_dir", str(tmp_path / "qd"), "--backend", "qdrant",
                              "--target_recall", "0"]) == 0
    q = np.zeros((2, DIM), dtype=np.float32)
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                     is_query=True)
    w = ShardWriter(tmp_path / "q.pkl", info, multi_vector=False)
    w.add(["a", "b"], q)
    w.close()
    capsys.readouterr()
    url = f"http://127.0.0.1:{free_port()}"
    assert search_driver.main(["--index", str(tmp_path / "qd"), "--encoded_queries", str(tmp_path / "q.pkl"),
                               "--output", str(tmp_path / "run.trec"), "--qdrant_url", url]) == 2
    assert url in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "run.trec").exists()
    # a timeout for an embedded folder would do nothing: refused, not ignored
    assert search_driver.main(["--index", str(tmp_path / "qd"), "--encoded_queries", str(tmp_path / "q.pkl"),
                               "--output", str(tmp_path / "run.trec"), "--qdrant_timeout", "5"]) == 2
    assert "--qdrant_timeout applies to a server" in one_error_line(capsys.readouterr().err)


def test_foreign_meta_json_is_one_line(tmp_path, shards, capsys):
    store = tmp_path / "store"
    store.mkdir()
    (store / "meta.json").write_text('{"something": "else"}')
    code = index_driver.main(["--passage_reps", shards, "--index_dir", str(tmp_path / "idx"), "--backend", "qdrant",
                              "--qdrant_path", str(store), "--target_recall", "0"])
    assert code == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(store / "meta.json") in line and "not qdrant-client local storage" in line
    assert (store / "meta.json").read_text() == '{"something": "else"}'
    assert not (tmp_path / "idx").exists()


HOLD = """
import sys, time
from multiview_plugin.search._qdrant import QdrantSettings
coll = QdrantSettings("held", sys.argv[1], engine=sys.argv[2]).connect()
coll.exists() if sys.argv[2] == "client" else coll.shard
print("holding", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("engine", ["client", "edge"])
def test_second_process_on_an_embedded_store_is_one_line(tmp_path, shards, capsys, engine):
    if engine == "edge":
        pytest.importorskip("qdrant_edge")
    # an index this test builds, then a second process that holds its storage open
    assert index_driver.main(["--passage_reps", shards, "--index_dir", str(tmp_path / "idx"), "--backend", "qdrant",
                              "--qdrant_engine", engine, "--qdrant_collection", "held", "--target_recall", "0"]) == 0
    close_embedded()
    capsys.readouterr()
    store = tmp_path / "idx" / "qdrant"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store), engine], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        q = np.zeros((1, DIM), dtype=np.float32)
        info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         is_query=True)
        w = ShardWriter(tmp_path / "q.pkl", info, multi_vector=False)
        w.add(["a"], q)
        w.close()
        assert search_driver.main(["--index", str(tmp_path / "idx"), "--encoded_queries", str(tmp_path / "q.pkl"),
                                   "--output", str(tmp_path / "run.trec")]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "in use by another process" in line and str(store) in line
        # a concurrent ingest into the same store is refused the same way
        assert index_driver.main(["--passage_reps", shards, "--index_dir", str(tmp_path / "idx2"), "--backend",
                                  "qdrant", "--qdrant_engine", engine, "--qdrant_path", str(store),
                                  "--qdrant_collection", "held", "--target_recall", "0"]) == 2
        assert "in use by another process" in one_error_line(capsys.readouterr().err)
    finally:
        holder.kill()
        holder.wait()


def test_driver_run_leaves_no_traceback_at_exit(tmp_path, shards):
    """qdrant-client's local client used to be closed by the interpreter's teardown (``QdrantClient.__del__``:
    'ImportError: sys.meta_path is None'); the drivers now close it at exit."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1"}
    run = subprocess.run([sys.executable, "-m", "multiview_plugin.driver.index", "--passage_reps", shards,
                          "--index_dir", str(tmp_path / "qd"), "--backend", "qdrant", "--target_recall", "0"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr


def fingerprinted_shards(folder: Path, docids, reps, mask, corpus_version: str, n_shards=2):
    """Shards whose sidecars carry a fingerprint, as the encode driver writes; ``corpus_version`` stands for the
    input file's identity (an edited corpus encodes to another)."""
    folder.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, len(docids), n_shards + 1).astype(int)
    for s in range(n_shards):
        fingerprint = {"model_name": "test", "model_weights": "w", "model_config": "c", "tokenizer": "t",
                       "input": corpus_version, "shard_index": s, "num_shards": n_shards, "dtype": "float32"}
        info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0,
                         shard_index=s, num_shards=n_shards, fingerprint=fingerprint)
        w = ShardWriter(folder / f"corpus.{s}.pkl", info, multi_vector=True)
        w.add(docids[bounds[s]:bounds[s + 1]], reps[bounds[s]:bounds[s + 1]], mask[bounds[s]:bounds[s + 1]])
        w.close()
    return sorted(folder.glob("corpus.*.pkl"))


@pytest.mark.parametrize("engine", ["client", "edge"])
def test_resume_over_changed_shards_is_refused(tmp_path, monkeypatch, engine):
    if engine == "edge":
        pytest.importorskip("qdrant_edge")
    docids, reps, mask = corpus(60)
    old = fingerprinted_shards(tmp_path / "emb", docids, reps, mask, "corpus v1")
    calls = {"n": 0}
    real = _qdrant._upsert

    def failing(coll, points):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("killed mid-ingest")
        real(coll, points)

    monkeypatch.setattr(_qdrant, "_upsert", failing)
    with pytest.raises(RuntimeError):
        build_qdrant_index(old, tmp_path / "qd", batch_size=10, engine=engine)
    monkeypatch.setattr(_qdrant, "_upsert", real)
    close_embedded()
    # the corpus was edited and re-encoded (same model, same docids) before the rerun
    edited = reps + 1.0
    new = fingerprinted_shards(tmp_path / "emb", docids, edited, mask, "corpus v2")
    with pytest.raises(ConfigError, match="resuming would keep its old vectors; pass --overwrite"):
        build_qdrant_index(new, tmp_path / "qd", batch_size=10, engine=engine)
    # --overwrite rebuilds it from the new shards: every point holds the edited vectors
    build_qdrant_index(new, tmp_path / "qd", batch_size=10, engine=engine, overwrite=True)
    from multiview_plugin.search import MultiVectorSearcher

    store = MultiVectorSearcher(tmp_path / "qd").store
    for doc in (0, 29, 59):
        np.testing.assert_allclose(store.doc_vectors(doc), edited[doc][mask[doc]], rtol=1e-6)


def test_report_counts_the_storage_on_disk(tmp_path, shards):
    assert index_driver.main(["--passage_reps", shards, "--index_dir", str(tmp_path / "qd"), "--backend", "qdrant",
                              "--qdrant_path", str(tmp_path / "elsewhere"), "--target_recall", "0"]) == 0
    close_embedded()
    report = index_report(tmp_path / "qd")
    total = sum(p.stat().st_size for p in (tmp_path / "elsewhere").rglob("*") if p.is_file())
    assert total > 0
    line = next(line for line in report.splitlines() if line.startswith("qdrant storage"))
    assert str(tmp_path / "elsewhere") in line and f"{total:,} bytes" in line


@pytest.mark.parametrize("engine", ["client", "edge"])
def test_changed_or_damaged_storage_is_refused_at_open(tmp_path, engine):
    """The collection record keeps digests of probe documents' vectors and the document count; a collection whose
    points were changed since, or whose storage lost points, is refused instead of searched."""
    if engine == "edge":
        pytest.importorskip("qdrant_edge")
    from multiview_plugin.search import MultiVectorSearcher

    docids, reps, mask = corpus(50)
    paths = write_shards(tmp_path, docids, reps, mask, 2)
    build_qdrant_index(paths, tmp_path / "qd", engine=engine, batch_size=8)
    searcher = MultiVectorSearcher(tmp_path / "qd")
    coll = searcher.store.collection
    probe = coll.marker()["probe"]
    assert 1 < len(probe) <= _qdrant.PROBES
    pid = next(iter(probe))
    views, doc = coll.vectors([pid])[pid]
    coll.upsert([(pid, views + 0.5, doc, {"docid": "x", "views": len(views)})])  # another vector, same id
    close_embedded()
    with pytest.raises(ConfigError, match="differ from those ingested"):
        MultiVectorSearcher(tmp_path / "qd")
    close_embedded()
    settings = _qdrant.QdrantSettings.from_record(json.loads((tmp_path / "qd" / "multiview.json").read_text())[
        "qdrant"], "multiview.json")
    raw = settings.connect(tmp_path / "qd")
    other = next(p for p in (_qdrant.point_id(d) for d in docids) if p not in probe)
    if engine == "edge":
        from qdrant_edge import UpdateOperation

        raw.shard.update(UpdateOperation.delete_points([other]))
    else:
        raw.client.delete(settings.collection, points_selector=[other])
    close_embedded()
    with pytest.raises(ConfigError, match="holds 49 documents, the folder describes 50"):
        MultiVectorSearcher(tmp_path / "qd")
