"""Shared fixtures: tiny random BERT models built locally (nothing is downloaded) and small train files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# every Ray cluster the tests start listens on 127.0.0.1 only: without this Ray rewrites a node address of
# 127.0.0.1 to the host's interface address and its servers listen on all interfaces (Ray reads it at import)
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# no --help text cached in the home folder (tests/driver/test_help.py tests the cache in a folder of its own)
os.environ.setdefault("MULTIVIEW_HELP_CACHE", "0")

from tools.testing import WORDS, make_tiny_bert, make_tiny_t5  # noqa: F401  (re-exported for tests)

PROGRESS_BAR = re.compile(r"\d+%\|")  # a tqdm bar: "Loading weights:  40%|####      | 2/5 [...]"


def without_progress_bars(err: str) -> str:
    """stderr without tqdm's progress bars (drawn unless TQDM_DISABLE is set; CI does not set it)."""
    parts = re.split(r"[\r\n]", err)
    return "\n".join(p for p in parts if p.strip() and not PROGRESS_BAR.search(p))


def shared_data_dir() -> Path | None:
    """``../shared/data`` beside the checkout (or $MULTIVIEW_SHARED_DATA), if present."""
    env = os.environ.get("MULTIVIEW_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


def write_topics_corpus(path: Path) -> Path:
    """The TOPICS passages as a corpus jsonl (docids d0..d7)."""
    path.write_text("".join(json.dumps({"docid": f"d{i}", "title": a, "text": t}) + "\n"
                            for i, (a, _, t) in enumerate(TOPICS)))
    return path


@pytest.fixture(scope="session")
def real_data() -> Path:
    """The real-data folder ($MULTIVIEW_SHARED_DATA or <repo>/../shared/data); skip when absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("real data not found at ../shared/data (set MULTIVIEW_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


TOPICS = [
    ("paris", "france", "paris is the capital of france and was built on the river"),
    ("london", "england", "london is the capital city of england on the river"),
    ("rome", "italy", "rome is the old capital of italy and was founded by a king"),
    ("berlin", "germany", "berlin is the large capital of germany in the north"),
    ("moon", "earth", "the moon is the small planet of the earth at night"),
    ("sun", "star", "the sun is the star of the earth and gives fire and light"),
    ("cat", "dog", "a cat is a small animal and a dog is a large one"),
    ("tree", "flower", "a tree is large and green and a flower is small and red"),
]


def write_train_file(path: Path, n_copies: int = 2) -> Path:
    """A small legacy-format Tevatron train file whose queries are answerable from their positive."""
    lines = []
    for copy in range(n_copies):
        for i, (a, b, text) in enumerate(TOPICS):
            neg = TOPICS[(i + 1) % len(TOPICS)]
            lines.append({
                "query_id": f"q{copy}_{i}",
                "query": f"what is {a}" if copy % 2 == 0 else f"where is {b}",
                "answers": [a],
                "positive_passages": [{"docid": f"d{i}", "title": a, "text": text}],
                "negative_passages": [{"docid": f"d{(i + 1) % len(TOPICS)}", "title": neg[0], "text": neg[2]}],
            })
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def train_file(tmp_path) -> Path:
    return write_train_file(tmp_path / "train.jsonl")


@pytest.fixture(scope="session")
def bert_no_dropout(tmp_path_factory) -> Path:
    """A tiny BERT without dropout: gradients compare exactly between two ways of computing them."""
    folder = make_tiny_bert(tmp_path_factory.mktemp("bert_nodrop"))
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster on loopback (127.0.0.1 only, see RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER above and
    ``listening_addresses``): a head node without CPUs (nothing is placed on it) and two worker nodes
    with 2 logical CPUs each; this process is connected to it. One per test module (~10 s), shut down after it,
    so no later test forks a process holding Ray's threads. Tests that remove a node add one back. Skips when
    Ray is not installed."""
    import signal

    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'multiview-plugin[ray]')")
    from ray.cluster_utils import Cluster

    # Ray's head node installs a SIGTERM handler (drain, then kill its processes) in this process; a process
    # forked later by another test (datasets' num_proc pool) would run it when terminated and hang: keep ours
    sigterm = signal.getsignal(signal.SIGTERM)
    # a lost node is declared dead after ~3 missed 1 s health checks (Ray's default waits longer)
    fast_failure = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
    store = 100 * 1024**2  # each node's object store: the tests move KBs (Ray's default takes 30% of the RAM)
    loopback = {"node_ip_address": "127.0.0.1", "dashboard_host": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "object_store_memory": store, **loopback,
                                                            "_system_config": fast_failure})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2, object_store_memory=store, **loopback)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, configure_logging=False)
        signal.signal(signal.SIGTERM, sigterm)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        signal.signal(signal.SIGTERM, sigterm)


def listening_addresses(pids) -> dict[tuple[str, int], str]:
    """(address, port) -> process name of every listening TCP socket of the processes ``pids`` (psutil)."""
    psutil = pytest.importorskip("psutil")
    out = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    out[(conn.laddr.ip, conn.laddr.port)] = proc.name()
        except psutil.Error:  # ended meanwhile
            continue
    return out


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 or ::1, also as an IPv4-mapped IPv6 address (::ffff:127.0.0.1)."""
    import ipaddress

    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def one_line(err: str, *needles: str) -> str:
    """The one ``error: ...`` line of a driver's stderr (no traceback), holding each of ``needles``."""
    assert "Traceback" not in err, err
    lines = [line[line.index("error: "):] for line in err.splitlines() if "error: " in line]  # after a tqdm bar
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# five short passages of 1-4 sentences (the sentence-view tests: dcsr, sentences, explain)
PASSAGES = {
    "d0": "paris is the capital of france. it was built on the river. the city has a large old book.",
    "d1": "london is the capital of england. the king wrote a play.",
    "d2": "rome is in italy. rome was founded by a king.",
    "d3": "berlin is in germany",
    "d4": "the moon is small. the sun is a star. a cat is red. a dog is blue.",
}


@pytest.fixture(scope="session")
def tiny_doc2query(tmp_path_factory):
    """A tiny random T5 seq2seq model (stands in for a doc2query checkpoint)."""
    return make_tiny_t5(tmp_path_factory.mktemp("tiny_doc2query"), seq2seq=True)


def poisoned_copy(shard: Path, out: Path, row: int, value: float = float("nan")) -> str:
    """A copy of ``shard`` (pickle and sidecar) with one value of ``row`` replaced; returns that row's id."""
    import pickle

    reps, lookup = pickle.loads(shard.read_bytes())
    reps = reps.copy()
    reps[row, 1] = value
    out.write_bytes(pickle.dumps((reps, lookup), protocol=5))
    Path(f"{out}.json").write_text(Path(f"{shard}.json").read_text())
    return lookup[row]


def one_line_error(capsys, *needles: str) -> str:
    """:func:`one_line` of what a driver wrote to stderr so far."""
    return one_line(capsys.readouterr().err, *needles)


def build_tiny_model(tiny_bert: Path, folder: Path, name: str = "mvr", scale: float | None = None) -> Path:
    """A tiny saved model (2 views for mvr, passage_max_len 32, query_max_len 16); ``scale`` multiplies the last
    LayerNorm's weight (NaN: broken weights; 1e6: vectors past float16's range)."""
    import torch

    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class

    torch.manual_seed(0)
    model = get_encoder_class(name).build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name=name, mvr_num_views=2),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
    if scale is not None:
        with torch.no_grad():
            norms = [p for n, p in model.named_parameters() if "LayerNorm.weight" in n]
            norms[-1].mul_(scale)
    model.save(folder)
    return folder


@pytest.fixture(scope="session")
def mvr_index(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """A tiny mvr model (2 views, passage_max_len 32), its TOPICS corpus (8 documents) and query file, their
    shards (``shard``, ``qshard``) and an index folder, built once through the drivers. Tests copy what they
    change."""
    from multiview_plugin.driver.encode import main as encode_main
    from multiview_plugin.driver.index import main as index_main

    root = tmp_path_factory.mktemp("mvr_index")
    model = build_tiny_model(tiny_bert, root / "mvr")
    corpus = write_topics_corpus(root / "corpus.jsonl")
    queries = root / "queries.tsv"
    queries.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    common = ["--model_name_or_path", str(model), "--per_device_eval_batch_size", "4"]
    assert encode_main([*common, "--dataset_path", str(corpus), "--encode_output_path", str(root / "c.pkl")]) == 0
    assert encode_main([*common, "--dataset_path", str(queries), "--encode_is_query",
                        "--encode_output_path", str(root / "q.pkl")]) == 0
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx")]) == 0
    return {"root": root, "model": model, "corpus": corpus, "queries": queries, "shard": root / "c.pkl",
            "qshard": root / "q.pkl", "index": root / "idx"}


@pytest.fixture(scope="session")
def saved_mvr(tiny_bert, tmp_path_factory) -> Path:
    """A saved tiny mvr model (2 views, passage_max_len 32, query_max_len 16). Tests copy what they change."""
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class

    folder = tmp_path_factory.mktemp("saved") / "mvr"
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=2),
        DataArguments(passage_max_len=32, query_max_len=16))
    model.save(folder)
    return folder
