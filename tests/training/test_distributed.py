"""torchrun with two CPU processes (gloo): cross-process in-batch negatives, and the train driver under DDP."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("model_name", ["mvr", "dpr"])
def test_gathered_negatives_equal_one_big_batch(tiny_bert, model_name):
    proc = torchrun([str(HERE / "distributed_check.py"), str(tiny_bert), model_name])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.count("OK") == 2, proc.stdout


def test_train_driver_under_torchrun(tiny_bert, train_file, tmp_path):
    out = tmp_path / "ddp"
    proc = torchrun(["-m", "multiview_plugin.driver.train", "--model_name", "mvr",
                     "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
                     "--output_dir", str(out), "--train_group_size", "2", "--per_device_train_batch_size", "2",
                     "--num_train_epochs", "2", "--logging_steps", "1", "--save_strategy", "no",
                     "--report_to", "none", "--mvr_num_views", "2", "--negatives_x_device", "--ddp_backend", "gloo"])
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "in-batch negatives gathered across 2 processes: 4 queries x 8 passages per step" in log
    state = json.loads((out / "trainer_state.json").read_text())
    # 16 queries / (2 processes x 2 per device) = 4 steps per epoch
    assert state["global_step"] == 8
    assert (out / "multiview_config.json").is_file()
