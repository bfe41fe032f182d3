"""Two writers, one output: two index builds (Faiss, Qdrant with either engine) or two encodes of the same output,
overlapping (the second started while the first is mid-write) and simultaneous (both started at once, as separate
processes). One finishes with a searchable output; the other is refused in one line; nothing of the first is
removed (a refused run used to delete the first run's fixed-name temporary file, `.docid.tmp`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multiview_plugin.encoding.shards import ShardInfo, ShardWriter, read_shard
from multiview_plugin.search import MultiVectorSearcher

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}
DIM = 8
BACKENDS = {"faiss": [], "qdrant-client": ["--backend", "qdrant"],
            "qdrant-edge": ["--backend", "qdrant", "--qdrant_engine", "edge"]}
REFUSED = ("another writer", "already holds a multiview index")


def needs(backend: str) -> None:
    if backend == "qdrant-client":
        pytest.importorskip("qdrant_client")
    elif backend == "qdrant-edge":
        pytest.importorskip("qdrant_edge")


@pytest.fixture(autouse=True)
def _release_embedded():
    yield
    if "multiview_plugin.search._qdrant" in sys.modules:
        sys.modules["multiview_plugin.search._qdrant"].close_embedded()


def write_shard(path: Path, n_docs: int = 60, views: int = 3) -> Path:
    rng = np.random.default_rng(0)
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0)
    w = ShardWriter(path, info, multi_vector=True)
    w.add([f"doc{i}" for i in range(n_docs)], rng.standard_normal((n_docs, views, DIM)).astype(np.float32),
          np.ones((n_docs, views), dtype=bool))
    w.close()
    return path


def start(module: str, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", f"multiview_plugin.driver.{module}", *argv], env=ENV, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def refusal(err: str) -> str:
    """The one ``error:`` line of a refused run (no traceback), naming why."""
    assert "Traceback" not in err, err
    lines = [line[line.index("error: "):] for line in err.splitlines() if "error: " in line]
    assert len(lines) == 1, err
    assert any(why in lines[0] for why in REFUSED), lines[0]
    return lines[0]


def assert_searchable(index_dir: Path, n_docs: int = 60) -> None:
    q = np.random.default_rng(1).standard_normal((3, DIM)).astype(np.float32)
    ids, _ = MultiVectorSearcher(index_dir, exact=True).search_vectors(q, 5)
    assert len(ids) == 3 and all(len(row) == 5 for row in ids)
    assert sorted(p.name for p in index_dir.iterdir() if p.name.endswith(".tmp")) == []  # its own, cleaned up
    assert not index_dir.with_name(index_dir.name + ".lock").exists()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_second_index_build_while_the_first_writes_is_refused_and_removes_nothing(tmp_path, monkeypatch, backend):
    """build: a second Qdrant ingest into the folder of a running one was refused and deleted the first run's
    `.docid.tmp` on its way out (the first then failed: no index); a second Faiss build replaced the first's."""
    needs(backend)
    from multiview_plugin.driver.index import main as index_main
    from multiview_plugin.index import build as _index
    from multiview_plugin.search import _qdrant

    shard = write_shard(tmp_path / "c.pkl")
    index_dir = tmp_path / "idx"
    argv = ["--passage_reps", str(shard), "--index_dir", str(index_dir), *BACKENDS[backend]]
    second: list[tuple[int, str]] = []

    def midway(real):
        def run_second_first(*args, **kwargs):
            if not second:  # the first run is mid-write: its temporary files exist now
                second.append(finish(start("index", *argv)))
            return real(*args, **kwargs)
        return run_second_first

    if backend == "faiss":
        monkeypatch.setattr(_index, "swap_in_folder", midway(_index.swap_in_folder))
    else:
        monkeypatch.setattr(_qdrant, "_upsert", midway(_qdrant._upsert))
    assert index_main(argv) == 0
    (rc, err), = second
    assert rc == 2 and "another writer" in refusal(err)
    assert_searchable(index_dir)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_two_index_builds_started_at_once_one_finishes_one_refused(tmp_path, backend):
    """build: two Qdrant ingests started at the same moment: neither built an index, one with a misleading "was not
    created by multiview_plugin"."""
    needs(backend)
    shard = write_shard(tmp_path / "c.pkl")
    index_dir = tmp_path / "idx"
    argv = ["--passage_reps", str(shard), "--index_dir", str(index_dir), *BACKENDS[backend]]
    results = [finish(p) for p in [start("index", *argv), start("index", *argv)]]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    refusal(next(err for rc, err in results if rc == 2))
    assert_searchable(index_dir)


@pytest.fixture(scope="module")
def encoder(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    import torch

    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class
    from tests.conftest import write_topics_corpus

    root = tmp_path_factory.mktemp("concurrent_encode")
    torch.manual_seed(0)
    get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=2),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16)).save(root / "mvr")
    return {"model": root / "mvr", "corpus": write_topics_corpus(root / "corpus.jsonl")}


def encode_argv(encoder: dict[str, Path], out: Path) -> list[str]:
    return ["--model_name_or_path", str(encoder["model"]), "--dataset_path", str(encoder["corpus"]),
            "--encode_output_path", str(out), "--per_device_eval_batch_size", "2"]


def test_second_encode_while_the_first_writes_is_refused_and_removes_nothing(encoder, tmp_path, monkeypatch):
    from multiview_plugin.driver.encode import main as encode_main
    from multiview_plugin.encoding import encode

    out = tmp_path / "c.pkl"
    second: list[tuple[int, str]] = []
    real = encode._encode_to_shard

    def run_second_first(*args, **kwargs):
        second.append(finish(start("encode", *encode_argv(encoder, out))))
        return real(*args, **kwargs)

    monkeypatch.setattr(encode, "_encode_to_shard", run_second_first)
    assert encode_main(encode_argv(encoder, out)) == 0
    (rc, err), = second
    assert rc == 2 and "another writer" in refusal(err)
    reps, lookup, _ = read_shard(out)
    assert len(lookup) == len(reps) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pkl", "c.pkl.json"]


def test_two_encodes_started_at_once_one_writes_the_other_is_refused_or_skips(encoder, tmp_path):
    out = tmp_path / "c.pkl"
    results = [finish(p) for p in [start("encode", *encode_argv(encoder, out)),
                                   start("encode", *encode_argv(encoder, out))]]
    assert 0 in [rc for rc, _ in results], results
    for rc, err in results:
        if rc != 0:  # refused while the other wrote; one that came after skips the finished shard (exit 0)
            assert rc == 2 and "another writer" in refusal(err)
    reps, lookup, _ = read_shard(out)
    assert len(lookup) == len(reps) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pkl", "c.pkl.json"]


def test_second_train_into_the_output_dir_of_a_running_one_is_refused(tiny_bert, tmp_path, monkeypatch):
    """train: two runs into one --output_dir saved checkpoints into the same folder and rotated each other's."""
    from multiview_plugin.driver.train import main as train_main
    from multiview_plugin.training.trainer import MultiViewTrainer
    from tests.conftest import write_train_file

    out = tmp_path / "run"
    argv = ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(write_train_file(tmp_path / "t.jsonl")),
            "--output_dir", str(out), "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
            "--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
            "--query_max_len", "16", "--passage_max_len", "32", "--dataloader_num_workers", "0",
            "--model_name", "mvr", "--mvr_num_views", "2"]
    second: list[tuple[int, str]] = []
    real = MultiViewTrainer._save_checkpoint

    def run_second_first(self, *args, **kwargs):
        if not second:  # the first run is training: its step-1 checkpoint is being saved
            second.append(finish(start("train", *argv)))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MultiViewTrainer, "_save_checkpoint", run_second_first)
    assert train_main(argv) == 0
    (rc, err), = second
    assert rc == 2 and "another writer" in refusal(err)
    assert (out / "model.safetensors").is_file() and (out / "multiview_run.json").is_file()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-1",
                                                                                          "checkpoint-2"]
    assert not tmp_path.joinpath("run.lock").exists()
