"""Tests of multiview_plugin/ray_runtime.py that need no cluster (tests/search/test_sharded.py and
tests/encoding/test_ray_encode.py run a local one)."""

from __future__ import annotations

import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.ray_runtime import WorkerActor, actor_options, one_line


def test_one_line_keeps_the_first_line_shortened():
    assert one_line(RuntimeError("lost node\nTraceback (most recent call last):\n ...")) == "lost node"
    assert one_line(RuntimeError("")) == "RuntimeError"
    assert one_line(RuntimeError("x" * 400), limit=10) == "x" * 10 + "..."


def test_actor_options_spread_and_leave_retries_to_the_caller():
    assert actor_options(num_cpus=1, num_gpus=0.5, max_restarts=2) == {
        "num_cpus": 1, "num_gpus": 0.5, "max_restarts": 2, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}
    with pytest.raises(ConfigError, match="^--ray_max_restarts must be >= 0, got -1$"):
        actor_options(num_cpus=1, num_gpus=0, max_restarts=-1)
    with pytest.raises(ConfigError, match="CPUs and GPUs must be >= 0, got -1 and 0"):
        actor_options(num_cpus=-1, num_gpus=0, max_restarts=0)


def test_a_worker_that_failed_to_set_up_raises_its_error_on_ping():
    worker = WorkerActor()
    assert worker.ping() is True
    worker.error = ConfigError("no such model")
    with pytest.raises(ConfigError, match="no such model"):
        worker.ping()
