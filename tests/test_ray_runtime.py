"""Tests of multiview_plugin/ray_runtime.py: options and checks without a cluster, and `--ray_address local` (a
loopback-only head that dies with its driver, even under kill -9) in driver subprocesses.
tests/search/test_sharded.py and tests/encoding/test_ray_encode.py run a local cluster of several nodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.ray_runtime import (
    WorkerActor,
    actor_options,
    check_ray_number,
    free_port,
    head_command,
    one_line,
    probe_address,
    split_address,
)
from tests.conftest import is_loopback, listening_addresses, without_progress_bars


def test_one_line_keeps_the_first_line_shortened():
    assert one_line(RuntimeError("lost node\nTraceback (most recent call last):\n ...")) == "lost node"
    assert one_line(RuntimeError("")) == "RuntimeError"
    assert one_line(RuntimeError("x" * 400), limit=10) == "x" * 10 + "..."


def test_actor_options_leave_restarts_and_retries_to_ray():
    """Ray restarts a lost actor and resubmits the calls it lost until it is back or its restarts are used up
    (``max_task_retries=-1``): no hand-written retry loop in the caller."""
    assert actor_options(num_cpus=1, num_gpus=0.5, max_restarts=2) == {
        "num_cpus": 1, "num_gpus": 0.5, "max_restarts": 2, "max_task_retries": -1, "scheduling_strategy": "SPREAD"}
    with pytest.raises(ConfigError, match="^--ray_max_restarts must be a finite number >= 0, got -1$"):
        actor_options(num_cpus=1, num_gpus=0, max_restarts=-1)
    with pytest.raises(ConfigError, match="CPUs must be a finite number > 0, got -1"):
        actor_options(num_cpus=-1, num_gpus=0, max_restarts=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -1, 0])
def test_ray_numbers_must_be_finite_and_positive(value):
    """Before: --ray_cpus_per_actor nan / --ray_timeout nan passed every `<= 0` check and ended in a ValueError
    traceback inside Ray."""
    with pytest.raises(ConfigError, match=r"^--ray_timeout must be a finite number > 0, got "):
        check_ray_number(value, "--ray_timeout")
    if value != 0:
        with pytest.raises(ConfigError, match=r"^--ray_workers must be a finite number >= 0, got "):
            check_ray_number(value, "--ray_workers", inclusive=True)
    check_ray_number(0, "--ray_workers", inclusive=True)
    check_ray_number(1, "--ray_shards_per_actor", minimum=1, inclusive=True)


def test_a_worker_that_failed_to_set_up_raises_its_error_on_ping():
    worker = WorkerActor()
    assert worker.ping() is True
    worker.error = ConfigError("no such model")
    with pytest.raises(ConfigError, match="no such model"):
        worker.ping()


def test_addresses_are_parsed_and_a_closed_port_fails_in_seconds():
    """Before: an address with nothing listening gave Ray's connection warnings until an outer timeout."""
    assert split_address("auto") is None and split_address("local") is None
    assert split_address("127.0.0.1:6379") == ("127.0.0.1", 6379)
    assert split_address("ray://head:10001") == ("head", 10001)
    assert split_address("[::1]:6379") == ("::1", 6379)
    for bad in ("head", "head:port", "head:0", ":6379"):
        with pytest.raises(ConfigError, match="expected host:port"):
            split_address(bad)
    port = free_port()
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"^--ray_address 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} "):
        probe_address(f"127.0.0.1:{port}")
    assert time.monotonic() - start < 10


def test_the_local_head_is_started_on_loopback_without_dashboard():
    cmd = head_command(6379, num_cpus=2)
    assert cmd[cmd.index("--node-ip-address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--include-dashboard") + 1] == "false"
    assert cmd[cmd.index("--dashboard-host") + 1] == "127.0.0.1"
    assert "--block" in cmd and cmd[cmd.index("--num-cpus") + 1] == "2"


# -- `--ray_address local` in a driver process ---------------------------------------------------------------

DRIVER = textwrap.dedent("""
    import sys, time
    from multiview_plugin.ray_runtime import ray_session
    with ray_session("local") as ray:
        print(ray.get_runtime_context().gcs_address, flush=True)
        ray.get(ray.remote(lambda: 1).remote())  # a worker process is up too
        print("ready", flush=True)
        time.sleep(float(sys.argv[1]))
""")


def ray_processes(driver_pid: int, gcs_port: int) -> set[int]:
    """The processes of the local instance a driver started: its descendants, and any process naming its GCS."""
    psutil = pytest.importorskip("psutil")
    pids = set()
    try:
        pids |= {p.pid for p in psutil.Process(driver_pid).children(recursive=True)}
    except psutil.Error:
        pass
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if f":{gcs_port}" in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE and proc.pid != os.getpid():
            pids.add(proc.pid)
    return pids


def alive(pids: set[int]) -> set[int]:
    psutil = pytest.importorskip("psutil")
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.Error:
            continue
    return out


def test_local_instance_is_loopback_only_ignores_RAY_ADDRESS_and_dies_with_a_killed_driver(tmp_path):
    """Before: `--ray_address local` followed RAY_ADDRESS (and hung on it); Ray rewrote 127.0.0.1 to the host's
    interface address, so the instance listened beyond the machine; after `kill -9` of the driver Ray's agent
    processes kept running. Now: a new instance, every socket of its processes (and the driver's) on loopback,
    and no process of it left within 60 s of the kill."""
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "RAY_ADDRESS": dead, "PYTHONPATH": os.getcwd()}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # as a user's shell: the driver pins loopback itself
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=env, text=True, start_new_session=True)
    try:
        gcs = driver.stdout.readline().strip()
        assert gcs.startswith("127.0.0.1:") and gcs != dead, (gcs, driver.stderr.read() if not gcs else "")
        assert driver.stdout.readline().strip() == "ready"
        port = int(gcs.rsplit(":", 1)[1])
        pids = ray_processes(driver.pid, port)
        assert len(pids) >= 3, pids  # watchdog, head, raylet, workers, ...
        sockets = listening_addresses(pids | {driver.pid})
        assert ("::ffff:127.0.0.1", port) in sockets or ("127.0.0.1", port) in sockets, sockets
        assert all(is_loopback(ip) for ip, _ in sockets), sockets
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(10)
        end = time.monotonic() + 60
        while alive(pids | ray_processes(driver.pid, port)) and time.monotonic() < end:
            time.sleep(0.5)
        left = alive(pids | ray_processes(driver.pid, port))
        assert not left, [(p, psutil.Process(p).cmdline()[:3]) for p in left]
    finally:
        if driver.poll() is None:
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait(10)


def test_a_driver_refused_by_token_authentication_keeps_the_cause(tmp_path):
    """Before: a cluster refusing the driver's token gave Ray's retries and a one line without the cause."""
    pytest.importorskip("ray")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("RAY_ADDRESS", None)
    owner = subprocess.Popen([sys.executable, "-c", DRIVER, "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, text=True)
    try:
        gcs = owner.stdout.readline().strip()
        assert gcs.startswith("127.0.0.1:"), owner.stderr.read() if not gcs else gcs
        wrong = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}
        out = subprocess.run([sys.executable, "-m", "multiview_plugin.driver.encode", "--model_name_or_path",
                              str(tmp_path / "model"), "--dataset_path", str(tmp_path / "corpus.jsonl"),
                              "--encode_output_path", str(tmp_path / "c.pkl"), "--ray_address", gcs],
                             capture_output=True, text=True, env=wrong, timeout=120)
        lines = without_progress_bars(out.stderr).splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert lines[0].startswith(f"error: --ray_address {gcs}: the Ray cluster at {gcs} refused this process "
                                   "(AuthenticationError: "), lines[0]
        assert "token" in lines[0].lower() and not list(tmp_path.iterdir())
    finally:
        owner.send_signal(signal.SIGTERM)
        owner.wait(60)


def test_a_port_of_another_service_is_one_line_in_seconds():
    """Something listens, but it is no Ray head: one line within the probe's deadline (Ray's own client retried
    for ~45 s before giving up)."""
    import socket
    import threading

    pytest.importorskip("ray")
    from multiview_plugin.ray_runtime import probe_gcs

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def accept() -> None:
        try:
            while True:
                server.accept()
        except OSError:  # closed at the end of the test
            return

    threading.Thread(target=accept, daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    start = time.monotonic()
    try:
        with pytest.raises(ConfigError, match=rf"^--ray_address {address}: something listens at {address}, but no "
                                              "Ray head answers there within 3 s"):
            probe_gcs(address, address, timeout=3)
    finally:
        server.close()
    assert time.monotonic() - start < 10


def test_an_actor_temporarily_unavailable_is_called_again_until_the_timeout(monkeypatch):
    """A search whose actor Ray reports *temporarily* unavailable (ActorUnavailableError: restarting, or being
    rescheduled off a lost node after Ray's own task retries ran out) is resubmitted (the call is idempotent) until
    it answers, within the one timeout; with no retry, or past the timeout, one WorkerLostError line."""
    import types

    from multiview_plugin import ray_runtime

    class RayError(Exception):
        pass

    class RayActorError(RayError):
        pass

    class ActorUnavailableError(RayActorError):
        pass

    exceptions = types.SimpleNamespace(RayError=RayError, RayActorError=RayActorError, RayTaskError=type(
        "RayTaskError", (RayError,), {}), GetTimeoutError=type("GetTimeoutError", (RayError,), {}),
        ActorUnavailableError=ActorUnavailableError)

    def get(ref, timeout=None):
        if ref == "down":
            raise ActorUnavailableError("The actor is temporarily unavailable")
        return ref

    monkeypatch.setattr(ray_runtime, "require_ray", lambda: types.SimpleNamespace(exceptions=exceptions, get=get))
    monkeypatch.setattr(ray_runtime.time, "sleep", lambda s: None)
    calls = iter(["down", "answer"])
    assert ray_runtime.get_result("down", "shard 0", 30, retry=lambda: next(calls)) == "answer"
    with pytest.raises(ray_runtime.WorkerLostError, match="shard 0: its Ray worker stayed unavailable"):
        ray_runtime.get_result("down", "shard 0", 30)
    with pytest.raises(ray_runtime.WorkerLostError, match="stayed unavailable"):
        ray_runtime.get_result("down", "shard 0", 0, retry=lambda: "down")
