"""Property-based tests (hypothesis) of the Qdrant backend's readers: storage folders (a foreign or corrupt
``meta.json``, files missing from the storage of either engine), the index folder's ``qdrant`` record, and server
URLs (malformed, wrong scheme, out-of-range or closed ports). Each generated case is a correct result or one
:class:`~multiview_plugin.errors.MultiViewError` (through a driver: exit 2, one ``error:`` line, no index folder),
never a traceback. Examples are bounded and derandomized; docs/reliability.md states how many are generated."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("qdrant_client")

from multiview_plugin.driver.index import main as index_main  # noqa: E402
from multiview_plugin.errors import MultiViewError  # noqa: E402
from multiview_plugin.search import MultiVectorSearcher  # noqa: E402
from multiview_plugin.search._qdrant import build_qdrant_index, close_embedded  # noqa: E402
from tests.search.test_qdrant import DIM, brute_force, corpus, write_shards  # noqa: E402

# Examples per property; their sum (x2 where parametrized over the two engines) is stated in docs/reliability.md.
META_JSON, RECORD, MISSING_FILES, URLS = 25, 30, 12, 40


def bounded(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def data():
    """Shards of 24 documents, the reference exact ranking of 3 queries, and one built index per engine."""
    root = Path(tempfile.mkdtemp(prefix="qdrant-props-"))
    docids, reps, mask = corpus(24)
    paths = write_shards(root, docids, reps, mask, 2)
    q = np.random.default_rng(1).standard_normal((3, DIM)).astype(np.float32)
    want = [[docids[i] for i in row] for row in brute_force(q, reps, mask, 5)[0]]
    built = {"client": root / "built-client"}
    build_qdrant_index(paths, built["client"])
    try:
        import qdrant_edge  # noqa: F401

        built["edge"] = root / "built-edge"
        build_qdrant_index(paths, built["edge"], engine="edge")
    except ImportError:
        pass
    close_embedded()
    yield {"root": root, "paths": paths, "q": q, "want": want, "built": built}
    close_embedded()
    shutil.rmtree(root, ignore_errors=True)


def fresh(root: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=root))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=8)
meta_json_bytes = st.one_of(
    st.binary(max_size=48),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"collections": json_values, "aliases": json_values}).map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.text(max_size=6), st.dictionaries(st.text(max_size=6), json_values, max_size=3),
                    max_size=2).map(lambda c: json.dumps({"collections": c, "aliases": {}}).encode()),
)


@bounded(META_JSON)
@given(content=meta_json_bytes)
def test_storage_meta_json_is_a_result_or_one_line(data, content):
    work = fresh(data["root"])
    store = work / "store"
    store.mkdir()
    (store / "meta.json").write_bytes(content)
    try:
        build_qdrant_index(data["paths"], work / "idx", qdrant_path=store)
    except MultiViewError as err:
        assert "\n" not in str(err)
        assert not (work / "idx").exists()  # nothing left behind
    else:
        assert MultiVectorSearcher(work / "idx", exact=True).search_vectors(data["q"], 5)[0].tolist() == data["want"]
    finally:
        close_embedded()


qdrant_records = st.one_of(
    json_values,
    st.fixed_dictionaries({"collection": st.one_of(st.just("built-client"), st.text(max_size=6), json_values)},
                          optional={"path": st.one_of(st.just("qdrant"), st.none(), st.text(max_size=6),
                                                      st.integers()),
                                    "engine": st.one_of(st.sampled_from(["client", "edge"]), json_values),
                                    "url": st.one_of(st.none(), st.sampled_from(["ftp://x", "http://", "nope"]),
                                                     st.integers()),
                                    "on_disk": json_values, "unknown": json_values}),
)


@bounded(RECORD)
@given(record=qdrant_records)
def test_index_folder_qdrant_record_is_a_result_or_one_line(data, record):
    work = fresh(data["root"])
    folder = work / "built-client"
    shutil.copytree(data["built"]["client"], folder)
    meta = json.loads((folder / "multiview.json").read_text())
    meta["qdrant"] = record
    (folder / "multiview.json").write_text(json.dumps(meta))
    try:
        got = MultiVectorSearcher(folder, exact=True).search_vectors(data["q"], 5)[0].tolist()
    except MultiViewError as err:
        assert "\n" not in str(err)
    else:
        assert got == data["want"]
    finally:
        close_embedded()


@pytest.mark.parametrize("engine", ["client", "edge"])
@bounded(MISSING_FILES)
@given(picks=st.sets(st.integers(0, 200), min_size=1, max_size=4))
def test_missing_storage_files_are_a_result_or_one_line(data, engine, picks):
    if engine not in data["built"]:
        pytest.skip("qdrant-edge-py is not installed")
    work = fresh(data["root"])
    folder = work / "idx"
    shutil.copytree(data["built"][engine], folder)
    files = sorted(p for p in (folder / "qdrant").rglob("*") if p.is_file())
    for i in picks:
        files[i % len(files)].unlink(missing_ok=True)
    try:
        got = MultiVectorSearcher(folder, exact=True).search_vectors(data["q"], 5)[0].tolist()
    except MultiViewError as err:
        assert "\n" not in str(err)
    else:
        assert got == data["want"]
    finally:
        close_embedded()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


urls = st.one_of(
    st.builds(lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
              st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "grpc://", "", "//", "http:/", "file://"]),
              st.sampled_from(["127.0.0.1", "localhost", "", "[::1]", "bad host", "%zz", "[::1", "user:pw@127.0.0.1"]),
              st.one_of(st.sampled_from(["", ":0", ":65536", ":99999", ":-1", ":abc", ":"]),
                        st.builds(lambda: f":{closed_port()}")),
              st.sampled_from(["", "/", "/collections", "?x=1", "#f"])),
    st.text(max_size=20),
)


@bounded(URLS)
@given(url=urls)
def test_server_url_is_one_error_line_and_no_folder(data, url, capsys):
    work = fresh(data["root"])
    code = index_main(["--passage_reps", str(data["root"] / "corpus.*.pkl"), "--index_dir", str(work / "idx"),
                       "--backend", "qdrant", f"--qdrant_url={url}", "--qdrant_timeout", "2", "--target_recall", "0"])
    err = capsys.readouterr().err
    if url:  # an empty --qdrant_url means embedded storage (argparse gives "")
        assert code == 2, (url, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, (url, err)
        assert not (work / "idx").exists()
    close_embedded()
