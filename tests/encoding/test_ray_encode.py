"""Encoding over a Ray cluster (driver.encode --ray_address): shards byte-identical to sequential encoding,
resumable, and still identical after a worker is killed or a worker node is lost mid-run."""

import json
import os
import re
import signal
import sys
import threading
import time

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS, without_progress_bars

SHARDS = 4


@pytest.fixture(scope="module")
def setup(tiny_bert, tmp_path_factory):
    """A tiny mvr model, a 480-document corpus and its 4 shards encoded sequentially (the reference)."""
    root = tmp_path_factory.mktemp("ray_encode")
    torch.manual_seed(0)
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=3),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32))
    model.save(root / "mvr")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"docid": f"d{i}", "title": TOPICS[i % 8][0],
                                          "text": f"{TOPICS[i % 8][2]} {TOPICS[(i // 8) % 8][1]}"}) + "\n"
                              for i in range(480)))
    common = ["--model_name_or_path", str(root / "mvr"), "--dataset_path", str(corpus),
              "--dataset_number_of_shards", str(SHARDS), "--per_device_eval_batch_size", "1",
              "--checkpoint_every", "1", "--device", "cpu"]
    for i in range(SHARDS):
        assert encode_main([*common, "--dataset_shard_index", str(i),
                            "--encode_output_path", str(root / "seq" / f"corpus.{i}.pkl")]) == 0
    return root, common


def assert_identical(root, out_dir):
    for i in range(SHARDS):
        for suffix in ("", ".json"):
            seq = (root / "seq" / f"corpus.{i}.pkl{suffix}").read_bytes()
            assert (out_dir / f"corpus.{i}.pkl{suffix}").read_bytes() == seq, (i, suffix)
        assert not list(out_dir.glob(f"corpus.{i}.pkl.*.partial")) and not (out_dir / f"corpus.{i}.pkl.lock").exists()


def ray_encode(common, out_dir, ray_cluster, *extra):
    return encode_main([*common, "--encode_output_path", str(out_dir / "corpus.pkl"),
                        "--ray_address", ray_cluster.address, "--ray_workers", "2", *extra])


def test_ray_encode_equals_sequential_and_skips_complete_shards(setup, ray_cluster, tmp_path):
    """Shards 0 and 1 are complete from an earlier run (the sequential files): the Ray run skips them (untouched)
    and encodes 2 and 3 on two workers; every shard and sidecar equals the sequential one byte for byte."""
    root, common = setup
    for i in (0, 1):
        for suffix in ("", ".json"):
            (tmp_path / f"corpus.{i}.pkl{suffix}").write_bytes((root / "seq" / f"corpus.{i}.pkl{suffix}").read_bytes())
    mtimes = [(tmp_path / f"corpus.{i}.pkl").stat().st_mtime_ns for i in (0, 1)]
    assert ray_encode(common, tmp_path, ray_cluster) == 0
    assert_identical(root, tmp_path)
    assert [(tmp_path / f"corpus.{i}.pkl").stat().st_mtime_ns for i in (0, 1)] == mtimes


RAY_WORKER_LOG = re.compile(r"\(\w+ pid=\d+")  # Ray forwards workers' output as "(EncodeWorker pid=123) ..."


def own_lines(err: str) -> list[str]:
    """This process's stderr lines: without progress bars, and without the output of an earlier test's Ray workers
    that Ray's log monitor forwards late."""
    lines = without_progress_bars(err).splitlines()
    return [line for line in lines if line.strip() and not RAY_WORKER_LOG.search(line)]


def test_ray_address_without_ray_is_one_error_line(setup, tmp_path, monkeypatch, capsys):
    _, common = setup
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert encode_main([*common, "--encode_output_path", str(tmp_path / "corpus.pkl"), "--ray_address", "auto"]) == 2
    err = own_lines(capsys.readouterr().err)
    assert len(err) == 1 and "needs Ray" in err[0] and "pip install" in err[0]
    assert not list(tmp_path.iterdir())
    # a Ray flag without --ray_address would be ignored: refused
    assert encode_main([*common, "--encode_output_path", str(tmp_path / "corpus.pkl"), "--ray_workers", "2"]) == 2
    err = own_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0] == "error: --ray_workers configures the Ray encode: add --ray_address"
    assert not list(tmp_path.iterdir())
    # given at its default value, a flag is still given (it would do nothing): refused the same way
    assert encode_main([*common, "--encode_output_path", str(tmp_path / "corpus.pkl"), "--ray_timeout", "3600"]) == 2
    err = own_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0] == "error: --ray_timeout configures the Ray encode: add --ray_address"
    assert not list(tmp_path.iterdir())


def encode_workers():
    """The Ray encode worker processes of this test session that are encoding a shard now: pid -> the raylet
    (node) they run under."""
    psutil = pytest.importorskip("psutil")
    out = {}
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if proc.cmdline()[:1] == ["ray::EncodeWorker.encode"]:
                out[proc.pid] = proc.parent().pid
        except Exception:  # noqa: BLE001 - the process ended meanwhile (psutil.Error)
            continue
    return out


def run_in_thread(fn):
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", fn()))
    thread.start()
    return thread, result


def wait_mid_shard(out_dir, deadline=60.0):
    """Until some shard is mid-encode (its resume state exists) and a worker process is up."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if list(out_dir.glob("corpus.*.pkl.state.partial")) and encode_workers():
            return
        time.sleep(0.01)
    raise AssertionError("no shard was seen mid-encode")


def test_ray_encode_survives_a_killed_worker_and_a_lost_node(setup, ray_cluster, tmp_path, caplog):
    """One run: a worker process is killed mid-shard, later a worker node is removed mid-shard; each lost
    shard is encoded again (resuming), and every shard equals the sequential one byte for byte."""
    root, common = setup
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in ray_cluster.worker_nodes}
    thread, result = run_in_thread(lambda: ray_encode(common, tmp_path, ray_cluster))
    try:
        wait_mid_shard(tmp_path)
        victim = next(iter(encode_workers()))
        os.kill(victim, signal.SIGKILL)
        end = time.monotonic() + 60
        while not [p for p in encode_workers() if p != victim] and time.monotonic() < end:
            time.sleep(0.05)
        busy = [raylet for pid, raylet in encode_workers().items() if pid != victim]
        if busy:  # else the run finished first: the node loss is then not exercised (asserted below)
            ray_cluster.remove_node(raylets[busy[0]], allow_graceful=False)
        thread.join(180)
        assert busy, "no shard was running after the kill"
        assert result.get("rc") == 0
        assert "its Ray encode worker was lost" in caplog.text and "did not come back" not in caplog.text
        assert_identical(root, tmp_path)
    finally:
        thread.join(180)
        if len(ray_cluster.worker_nodes) < 2:
            ray_cluster.add_node(num_cpus=2, object_store_memory=100 * 1024**2)
            ray_cluster.wait_for_nodes()


def test_ray_encode_of_one_shard_writes_the_file_the_sequential_encode_writes(setup, ray_cluster, tmp_path):
    """Before: the Ray encode wrote c.0.pkl where the sequential encode of the same command writes c.pkl. Now a
    single shard goes to --encode_output_path itself, byte for byte the sequential file."""
    root, _ = setup
    corpus = tmp_path / "small.jsonl"
    corpus.write_text("".join(json.dumps({"docid": f"d{i}", "text": TOPICS[i % 8][2]}) + "\n" for i in range(24)))
    common = ["--model_name_or_path", str(root / "mvr"), "--dataset_path", str(corpus),
              "--per_device_eval_batch_size", "4", "--device", "cpu"]
    assert encode_main([*common, "--encode_output_path", str(tmp_path / "seq" / "c.pkl")]) == 0
    assert encode_main([*common, "--encode_output_path", str(tmp_path / "ray" / "c.pkl"),
                        "--ray_address", ray_cluster.address]) == 0
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == ["c.pkl", "c.pkl.json"]
    for name in ("c.pkl", "c.pkl.json"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "seq" / name).read_bytes()


@pytest.mark.parametrize(("flags", "needle"), [
    (["--ray_timeout", "nan"], "error: --ray_timeout must be a finite number > 0, got nan"),
    (["--ray_cpus_per_worker", "inf"], "error: --ray_cpus_per_worker must be a finite number > 0, got inf"),
    (["--ray_gpus_per_worker", "-1"], "error: --ray_gpus_per_worker must be a finite number >= 0, got -1"),
    (["--ray_workers", "2", "--ray_cpus_per_worker", "3"],
     "error: 2 Ray encode workers need 6 CPUs and 0 GPUs, the Ray cluster has 4 CPUs and 0 GPUs"),
])
def test_ray_encode_options_are_checked_before_any_worker_starts(setup, ray_cluster, tmp_path, capsys, flags,
                                                                 needle):
    """Before: a nan was a ValueError traceback, and workers the cluster cannot hold waited for --ray_timeout."""
    _, common = setup
    start = time.monotonic()
    assert ray_encode(common, tmp_path, ray_cluster, *flags) == 2
    err = own_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith(needle), err
    assert time.monotonic() - start < 30 and not list(tmp_path.iterdir())
