"""Ray as the cluster runtime: connecting, placing actors and calling them so that a lost worker never loses work.

Used by the Ray encode (:mod:`multiview_plugin.encoding.ray_encode`) and the sharded search
(:mod:`multiview_plugin.search.sharded`). Ray is imported lazily: the package works without it, and only
``--ray_address`` (or ``ray_address=``) asks for it (``pip install "multiview-plugin[ray]"``).

Connecting (:func:`ray_session`). Every ``--ray_*`` number is checked (finite, in range) before Ray starts
(:func:`check_ray_number`). An address is probed with a short socket deadline before ``ray.init``, so nothing
listening there is one line within seconds (:func:`probe_address`), not Ray's connection retries; an explicit
address wins over a ``RAY_ADDRESS`` in the environment (Ray's own ``ray.init`` lets the variable win). ``local``
starts a new one-machine instance for this run (never the one ``RAY_ADDRESS`` names): a head node on 127.0.0.1
only (:class:`LocalRay`), run by a watchdog process in a session of its own that stops it, and every process it
started, when this process closes the pipe to it: at the end of the block, or when this process dies, even by
``kill -9``.

Fault handling is Ray's own. Actors are created with ``max_restarts`` (Ray restarts a crashed actor, or one whose
node is lost, on any node with room, rerunning its constructor) and ``max_task_retries=-1`` (Ray resubmits a
call whose actor died under it until the actor is back, or gone for good once its restarts are used up; a count
of retries would be spent on the refused connections while a lost node's actor is being restarted elsewhere):
:func:`actor_options`. The caller only waits for the result (:func:`get_result`): a call not answered within
``timeout`` seconds (its actor cannot be placed on any surviving node), or whose actor is gone for good
(restarts used up: ``RayActorError``), raises :class:`WorkerLostError`, one line naming what was lost: the run
stops rather than return fewer results. Before any actor is created, the cluster's CPUs and GPUs are compared with
what the actors reserve (:func:`check_resources`), so a cluster too small for them fails at once instead of
waiting for ``timeout``.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from multiview_plugin.errors import ConfigError, MultiViewError

logger = logging.getLogger(__name__)

DEFAULT_MAX_RESTARTS = 3  # --ray_max_restarts of driver.encode and driver.search: restarts of a lost worker
DEFAULT_ENCODE_TIMEOUT = 3600.0  # driver.encode --ray_timeout: seconds to wait for a shard or a restarting worker
DEFAULT_SEARCH_TIMEOUT = 600.0  # driver.search --ray_timeout / ShardedSearcher: seconds a shard may take to answer
PROBE_TIMEOUT = 5.0  # seconds a --ray_address's head may take to accept a TCP connection before ray.init
GCS_PROBE_TIMEOUT = 15.0  # seconds its GCS may then take to answer (a healthy one answers in milliseconds)
LOCAL_START_TIMEOUT = 120.0  # seconds `--ray_address local`'s head may take to come up
LOOPBACK = "127.0.0.1"
RAY_INSTALL_HINT = 'pip install "multiview-plugin[ray]" (or pip install "ray>=2.9")'
# Ray rewrites a node address of 127.0.0.1 to the host's interface address (and its servers then listen on every
# interface) unless this variable is 0; Ray reads it when it is imported, so it is set in the processes it starts
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class WorkerActor:
    """The base of this package's Ray actors: an error while setting up (kept in ``error`` by the subclass's
    constructor) is raised by every call, so it reaches the caller as itself; :meth:`ping` answers once the actor is
    up, :meth:`node` names the node it runs on, :meth:`restarted` says once whether Ray restarted this actor."""

    error: BaseException | None = None
    _restart_reported: bool = False

    def ping(self) -> bool:
        if self.error is not None:
            raise self.error
        return True

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def restarted(self) -> bool:
        """True the first time it is asked after Ray restarted this actor (its process or node was lost)."""
        import warnings

        import ray

        if self._restart_reported:
            return False
        with warnings.catch_warnings():  # Ray's property reads its own deprecated actor_id
            warnings.simplefilter("ignore", DeprecationWarning)
            restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self._restart_reported = restarted
        return restarted


class WorkerLostError(MultiViewError):
    """A Ray worker (actor) was lost and its work could not be finished elsewhere."""


def require_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray_address needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    return ray


def check_ray_number(value: float, flag: str, *, minimum: float = 0.0, inclusive: bool = False) -> None:
    """A ``--ray_*`` number: finite and above ``minimum`` (at least it where ``inclusive``), else one line."""
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (value >= minimum if inclusive
                                                                         else value > minimum)
    if not ok:
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise ConfigError(f"{flag} must be a finite number {bound}, got {value}")


def one_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (Ray's carry tracebacks), shortened."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= limit else line[:limit] + "..."


# -- connecting ---------------------------------------------------------------------------------------------------
def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port``, ``[v6]:port`` or ``ray://host:port``; None for ``auto`` / ``local``."""
    if address in ("auto", "local"):
        return None
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.split("/", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray_address {address}: expected host:port, ray://host:port, auto or local")
    return host.strip("[]"), int(port)


def probe_address(address: str, timeout: float = PROBE_TIMEOUT) -> None:
    """One line unless something accepts a TCP connection at ``address`` within ``timeout`` seconds."""
    where = split_address(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=timeout):
            return
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or type(err).__name__)
        raise ConfigError(f"--ray_address {address}: nothing answers at {where[0]}:{where[1]} ({reason} within "
                          f"{timeout:g} s); start a cluster with `ray start --head` (see docs/scaling.md) or pass "
                          "--ray_address local") from None


@contextmanager
def ray_session(address: str) -> Iterator[Any]:
    """Connect to the Ray cluster at ``address`` for the duration of the block; yields the ``ray`` module.

    ``address``: ``auto`` (the cluster this machine joined with ``ray start``, or ``RAY_ADDRESS``), ``host:port``
    (its head), ``ray://host:10001`` (Ray Client) or ``local`` (a new one-machine Ray instance on 127.0.0.1 for
    this run, stopped at the end of the block or when this process dies). When this process is already connected
    (``ray.init`` was called), that connection is used and left open.
    """
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    if address == "local":
        local_token_auth()
    with LocalRay() if address == "local" else _no_local() as local:
        target = local.address if local is not None else address
        if local is None and address == "auto" and os.environ.get("RAY_ADDRESS"):
            target = os.environ["RAY_ADDRESS"]
        probe_address(target)
        probe_gcs(target, address)
        _connect(ray, target, address)
        try:
            yield ray
        finally:
            ray.shutdown()


def probe_gcs(target: str, given: str, timeout: float = GCS_PROBE_TIMEOUT) -> None:
    """Ask the head's GCS at ``target`` (host:port) once, with Ray's GCS client, before ``ray.init`` (which would
    retry for tens of seconds and then lose the reason): a refusal (token authentication) is one line with Ray's reason;
    no GCS answer within ``timeout`` seconds (another service on that port) is one line too."""
    if split_address(target) is None or "://" in target:
        return
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # an older Ray: ray.init reports what it can
        return
    outcome: dict[str, BaseException] = {}
    done = threading.Event()

    def ask() -> None:
        try:
            GcsClient(address=target)
        except Exception as err:  # noqa: BLE001 - judged below
            outcome["error"] = err
        finally:
            done.set()

    with _quiet_stderr():  # Ray's C++ client logs the same refusal to stderr
        threading.Thread(target=ask, daemon=True).start()
        answered = done.wait(timeout)
    if not answered:
        raise ConfigError(f"--ray_address {given}: something listens at {target}, but no Ray head answers there "
                          f"within {timeout:g} s (another service's port?)")
    err = outcome.get("error")
    if isinstance(err, AuthenticationError):
        raise ConfigError(f"--ray_address {given}: the Ray cluster at {target} refused this process "
                          f"(AuthenticationError: {one_line(err, 200)})")
    if err is not None:
        logger.debug("GCS probe of %s: %s", target, err)  # ray.init reports it


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the block (what Ray's C++ code logs there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def local_token_auth() -> None:
    """``local``: token authentication as ``ray.init()`` sets it up for a new local instance (Ray >= 2.52): unless
    ``RAY_AUTH_MODE`` is set, this process and the head it starts use Ray's token (``~/.ray/auth_token``, made
    by Ray if missing)."""
    try:
        from ray._private.authentication import authentication_token_setup as auth
    except ImportError:  # an older Ray without token authentication
        return
    if os.environ.get(auth.AUTH_MODE_ENV_VAR) is None:
        auth.enable_token_auth_by_default()
    auth.ensure_token_if_auth_enabled(None, create_token_if_missing=True)


@contextmanager
def _no_local() -> Iterator[None]:
    yield None


def _connect(ray: Any, target: str, given: str) -> None:
    """``ray.init(address=target)``, with ``RAY_ADDRESS`` out of the way unless ``auto`` asked for it."""
    saved = os.environ.pop("RAY_ADDRESS", None) if given != "auto" else None
    try:
        with _loopback_driver(ray, given == "local"):
            ray.init(address=target, configure_logging=False)
    except Exception as err:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, AuthenticationError, ...
        raise ConfigError(f"--ray_address {given}: cannot connect to the Ray cluster at {target} "
                          f"({type(err).__name__}: {one_line(err, 200)}); start one with `ray start --head` (see "
                          "docs/scaling.md) or pass --ray_address local") from None
    finally:
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved


@contextmanager
def _loopback_driver(ray: Any, on: bool) -> Iterator[None]:
    """While on: Ray in this process keeps 127.0.0.1 as 127.0.0.1 (else ``ray.init`` rewrites the local head's
    address to the host's interface address, where nothing listens), as :data:`LOOPBACK_ENV` does for the
    processes it starts; Ray reads that variable at import, so its constant is set for the ``ray.init`` call."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if not on or constants is None or not hasattr(constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    saved = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved


class LocalRay:
    """``--ray_address local``: a one-machine Ray head for this process, on 127.0.0.1 only, that dies with it.

    A watchdog (``python -m multiview_plugin.ray_runtime``, in a session of its own) runs ``ray start --head
    --block`` and waits for its stdin, a pipe from this process, to close; then it stops the head and kills any
    process it left (the watchdog is their subreaper, so none escapes by being orphaned). The pipe closes when
    :meth:`close` runs, and also when this process dies in any way, ``kill -9`` included.
    """

    def __init__(self, num_cpus: int | None = None, start_timeout: float = LOCAL_START_TIMEOUT):
        self.port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        # a folder of this run's own for Ray's session files and the head's output: Ray writes the address of the
        # last head started into its temp folder (/tmp/ray), where `auto` would later find this one, long gone
        self.folder = Path(tempfile.mkdtemp(prefix="multiview-ray-"))
        self.log = self.folder / "head.log"
        cmd = [sys.executable, "-m", "multiview_plugin.ray_runtime", str(self.folder),
               *head_command(self.port, num_cpus, self.folder)]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | LOOPBACK_ENV
        self.watchdog = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            self._wait_up(start_timeout)
        except BaseException:
            self.close()
            raise
        logger.info("--ray_address local: a Ray head on %s (stopped when this run ends)", self.address)

    def _wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.watchdog.poll() is not None:
                raise ConfigError(f"--ray_address local: the local Ray instance did not start ({self._last_log()})")
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.2)
        raise ConfigError(f"--ray_address local: the local Ray instance did not come up in {timeout:g} s "
                          f"({self._last_log()})")

    def _last_log(self) -> str:
        try:
            lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "no output"
        return lines[-1][:200] if lines else "no output"

    def close(self) -> None:
        """Stop the head and every process it started (the watchdog does it once its stdin closes)."""
        if self.watchdog.stdin is not None and not self.watchdog.stdin.closed:
            self.watchdog.stdin.close()
        try:
            self.watchdog.wait(timeout=60)
        except subprocess.TimeoutExpired:
            logger.warning("the local Ray instance's watchdog (pid %d) did not stop in 60 s", self.watchdog.pid)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> LocalRay:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def head_command(port: int, num_cpus: int | None = None, temp_dir: Path | None = None) -> list[str]:
    """``ray start --head`` on loopback (its Ray Client server on a free port), without dashboard or usage reporting,
    blocking."""
    cmd = [sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start", "--head", "--block",
           "--node-ip-address", LOOPBACK, "--port", str(port), "--include-dashboard", "false",
           "--dashboard-host", LOOPBACK, "--disable-usage-stats", "--ray-client-server-port", str(free_port())]
    if num_cpus is not None:
        cmd += ["--num-cpus", str(num_cpus)]
    if temp_dir is not None:
        cmd += ["--temp-dir", str(temp_dir)]
    return cmd


def _watch(folder: str, cmd: list[str]) -> int:
    """The watchdog's body: run ``cmd`` (its output to ``folder``/head.log) until stdin closes (or it ends), then
    stop it and all it started; ``folder`` (this run's, made by :class:`LocalRay`) is removed once stdin closed."""
    import psutil

    _become_subreaper()
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), closed.set()), daemon=True).start()
    try:
        with open(Path(folder) / "head.log", "wb") as out:
            head = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            while not closed.wait(0.5) and head.poll() is None:
                pass
            me = psutil.Process()
            if head.poll() is None:
                head.terminate()  # `ray start --block` stops its processes on SIGTERM
                try:
                    head.wait(20)
                except subprocess.TimeoutExpired:
                    pass
            for _ in range(3):  # whatever is left (orphans are re-parented to this subreaper): killed
                left = me.children(recursive=True)
                if not left:
                    break
                for proc in left:
                    try:
                        proc.kill()
                    except psutil.Error:
                        pass
                psutil.wait_procs(left, timeout=5)
    finally:
        if closed.is_set():  # else the driver reads why the head ended, and removes the folder
            shutil.rmtree(folder, ignore_errors=True)
    return 0


def _become_subreaper() -> None:
    """Linux: orphaned descendants are re-parented to this process (so it can find and stop them)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            logger.debug("cannot become a child subreaper")


# -- actors -------------------------------------------------------------------------------------------------------
def actor_options(*, num_cpus: float, num_gpus: float, max_restarts: int) -> dict[str, Any]:
    """Ray actor options: the resources one worker reserves, Ray's restarts of a lost actor and retries of the
    calls it lost (until the actor is back or its ``max_restarts`` are used up: ``max_task_retries=-1``; a finite
    count was spent on refused connections while a lost node's actor was restarted elsewhere), spread over the
    nodes."""
    check_ray_number(num_cpus, "a Ray worker's CPUs")
    check_ray_number(num_gpus, "a Ray worker's GPUs", inclusive=True)
    check_ray_number(max_restarts, "--ray_max_restarts", inclusive=True)
    return {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": max_restarts,
            "max_task_retries": -1, "scheduling_strategy": "SPREAD"}


def check_resources(ray: Any, actors: int, num_cpus: float, num_gpus: float, what: str, flags: str) -> None:
    """One line unless the cluster's CPUs and GPUs hold ``actors`` actors reserving ``num_cpus`` / ``num_gpus``
    each (else Ray would wait for room forever)."""
    total = ray.cluster_resources()
    have_cpu, have_gpu = total.get("CPU", 0.0), total.get("GPU", 0.0)
    need_cpu, need_gpu = actors * num_cpus, actors * num_gpus
    if need_cpu > have_cpu + 1e-9 or need_gpu > have_gpu + 1e-9:
        raise ConfigError(f"{actors} {what} need {need_cpu:g} CPUs and {need_gpu:g} GPUs, the Ray cluster has "
                          f"{have_cpu:g} CPUs and {have_gpu:g} GPUs: lower {flags} or add nodes")


def unwrap_task_error(err: BaseException) -> BaseException:
    """The user exception a ``RayTaskError`` carries (raised by the actor's own code), else ``err``."""
    ray = require_ray()
    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, BaseException):
            return cause
    return err


def get_result(ref: Any, what: str, timeout: float, retry: Callable[[], Any] | None = None) -> Any:
    """The result of an actor call (``ref``), which Ray retries itself after the actor is lost and restarted.

    An error raised by the actor's own code is re-raised as itself (a :class:`MultiViewError` stays a one-line
    error); no answer within ``timeout`` seconds, or the actor gone for good: :class:`WorkerLostError` naming
    ``what``. ``retry`` (an idempotent call: a search, a ping) resubmits the call when Ray reports the actor
    *temporarily* unavailable (``ActorUnavailableError``: restarting, or being rescheduled off a lost node, after
    Ray's own task retries ran out), until ``timeout`` seconds have passed in all."""
    ray = require_ray()
    unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except unavailable as err:
            if retry is None or time.monotonic() >= deadline:
                raise WorkerLostError(f"{what}: its Ray worker stayed unavailable ({one_line(err, 160)}); the run "
                                      "stops rather than return partial results") from None
            logger.info("%s: its Ray worker is temporarily unavailable; calling it again", what)
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            ref = retry()
        except ray.exceptions.GetTimeoutError:
            raise WorkerLostError(f"{what}: no answer from its Ray worker in {timeout:g} s (its node lost, and no "
                                  "surviving node has room for it?); the run stops rather than return partial "
                                  "results") from None
        except ray.exceptions.RayActorError as err:
            raise WorkerLostError(f"{what}: its Ray worker was lost and not restarted ({type(err).__name__}: "
                                  f"{one_line(err, 160)}); the run stops rather than return partial results"
                                  ) from None
        except ray.exceptions.RayTaskError as err:
            raise unwrap_task_error(err) from None
        except ray.exceptions.RayError as err:  # e.g. OutOfMemoryError: Ray's memory monitor killed the worker
            raise WorkerLostError(f"{what}: its Ray worker failed ({type(err).__name__}: {one_line(err, 200)}); "
                                  "the run stops rather than return partial results") from None


if __name__ == "__main__":  # the watchdog of LocalRay: python -m multiview_plugin.ray_runtime FOLDER CMD...
    sys.exit(_watch(sys.argv[1], sys.argv[2:]))
