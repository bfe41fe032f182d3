"""Ray as the cluster runtime: connecting, placing actors and calling them so that a lost worker never loses work.

Used by the Ray encode (:mod:`multiview_plugin.encoding.ray_encode`) and the sharded search
(:mod:`multiview_plugin.search.sharded`). Ray is imported lazily: the package works without it, and only
``--ray_address`` (or ``ray_address=``) asks for it (``pip install "multiview-plugin[ray]"``).

Fault handling. Actors are created with ``max_restarts`` (Ray restarts a crashed actor, or one whose node is lost,
on any node with room, rerunning its constructor). A call whose actor dies under it raises ``RayActorError``
(``ActorDiedError``, ``ActorUnavailableError``) in the caller; :func:`call_with_retries` then waits for the actor
to come back (a ping, bounded by ``timeout``) and calls again, at most ``retries`` times. A call that is not
answered within ``timeout`` seconds (its actor cannot be placed on any surviving node), or that fails more often
than allowed, raises :class:`WorkerLostError`, one line naming what was lost: the run stops rather than return
fewer results.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from multiview_plugin.errors import ConfigError, MultiViewError

logger = logging.getLogger(__name__)

DEFAULT_MAX_RESTARTS = 3  # --ray_max_restarts of driver.encode and driver.search: restarts of a lost worker
DEFAULT_ENCODE_TIMEOUT = 3600.0  # driver.encode --ray_timeout: seconds to wait for a shard or a restarting worker
DEFAULT_SEARCH_TIMEOUT = 600.0  # driver.search --ray_timeout / ShardedSearcher: seconds a shard may take to answer
RAY_INSTALL_HINT = 'pip install "multiview-plugin[ray]" (or pip install "ray>=2.9")'


class WorkerActor:
    """The base of this package's Ray actors: an error while setting up (kept in ``error`` by the subclass's
    constructor) is raised by every call, so it reaches the caller as itself; :meth:`ping` answers once the actor is
    up (:func:`call_with_retries` waits on it after a restart), :meth:`node` names the node it runs on."""

    error: BaseException | None = None

    def ping(self) -> bool:
        if self.error is not None:
            raise self.error
        return True

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class WorkerLostError(MultiViewError):
    """A Ray worker (actor) was lost and its work could not be finished elsewhere."""


def require_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray_address needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    return ray


@contextmanager
def ray_session(address: str) -> Iterator[Any]:
    """Connect to the Ray cluster at ``address`` for the duration of the block; yields the ``ray`` module.

    ``address``: ``auto`` (the cluster this machine joined with ``ray start``), ``host:port`` (its head),
    ``ray://host:10001`` (Ray Client) or ``local`` (start a one-machine Ray instance for this run). When this
    process is already connected (``ray.init`` was called), that connection is used and left open.
    """
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    try:
        if address == "local":
            ray.init(include_dashboard=False, configure_logging=False)
        else:
            ray.init(address=address, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise ConfigError(f"--ray_address {address}: cannot connect to a Ray cluster ({one_line(err)}); start one "
                          "with `ray start --head` (see docs/scaling.md) or pass --ray_address local") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def one_line(err: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (Ray's carry tracebacks), shortened."""
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= limit else line[:limit] + "..."


def actor_options(*, num_cpus: float, num_gpus: float, max_restarts: int) -> dict[str, Any]:
    """Ray actor options: the resources one worker reserves, restarts on failure, spread over the nodes."""
    if num_cpus < 0 or num_gpus < 0:
        raise ConfigError(f"a Ray worker's CPUs and GPUs must be >= 0, got {num_cpus} and {num_gpus}")
    if max_restarts < 0:
        raise ConfigError(f"--ray_max_restarts must be >= 0, got {max_restarts}")
    # max_task_retries stays 0: the caller retries (call_with_retries), so a lost call is seen and counted
    return {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": max_restarts, "max_task_retries": 0,
            "scheduling_strategy": "SPREAD"}


def wait_alive(actor: Any, timeout: float) -> bool:
    """Whether ``actor`` answers a ping within ``timeout`` seconds. A restarting actor is pinged until it answers
    (calls to it fail with ``ActorUnavailableError`` meanwhile); a dead one (``ActorDiedError``: restarts used up)
    or one that no node can hold does not answer."""
    ray = require_ray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ref = actor.ping.remote()
        ready, _ = ray.wait([ref], timeout=left)
        if not ready:
            ray.cancel(ref, force=False)
            return False
        try:
            ray.get(ref)
            return True
        except ray.exceptions.ActorUnavailableError:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        except ray.exceptions.RayActorError:
            return False
        except ray.exceptions.RayTaskError as err:  # the actor's constructor failed: its own error
            raise unwrap_task_error(err) from None


def unwrap_task_error(err: BaseException) -> BaseException:
    """The user exception a ``RayTaskError`` carries (raised by the actor's own code), else ``err``."""
    ray = require_ray()
    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, BaseException):
            return cause
    return err


def call_with_retries(submit: Callable[[], Any], actor: Callable[[], Any], what: str, *, retries: int,
                      timeout: float, first: Any = None) -> Any:
    """The result of ``submit()`` (an ObjectRef of an actor call); ``first``: an already submitted first try.

    A ``RayActorError`` (the actor died or became unreachable mid-call) is retried after the actor
    (``actor()``) answers a ping again, at most ``retries`` times; an error raised by the actor's own code is
    re-raised as itself (a :class:`MultiViewError` stays a one-line error). No answer within ``timeout`` seconds,
    or more failures than ``retries``: :class:`WorkerLostError` naming ``what``.
    """
    ray = require_ray()
    ref = first if first is not None else submit()
    for attempt in range(retries + 1):
        ready, _ = ray.wait([ref], timeout=timeout)
        if not ready:
            raise WorkerLostError(f"{what}: no answer from its Ray worker in {timeout:g} s (its node lost, and no "
                                  "surviving node has room for it?); the run stops rather than return partial "
                                  "results")
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as err:
            if attempt == retries:
                raise WorkerLostError(f"{what}: its Ray worker was lost {attempt + 1} times ({type(err).__name__}: "
                                      f"{one_line(err, 160)}); the run stops rather than return partial results") \
                    from None
            logger.warning("%s: its Ray worker was lost (%s); waiting for it to restart and retrying (%d of %d)",
                           what, type(err).__name__, attempt + 1, retries)
            started = time.monotonic()
            if not wait_alive(actor(), timeout):
                raise WorkerLostError(f"{what}: its Ray worker was lost ({type(err).__name__}) and did not come back "
                                      f"in {timeout:g} s (restarts used up, or no node has room for it); the run "
                                      "stops rather than return partial results") from None
            logger.info("%s: its worker is back after %.1f s", what, time.monotonic() - started)
            ref = submit()
        except ray.exceptions.RayTaskError as err:
            raise unwrap_task_error(err) from None
    raise AssertionError("unreachable")
