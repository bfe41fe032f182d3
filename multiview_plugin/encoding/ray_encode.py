"""Encoding over a Ray cluster: a pool of actors, one model each (a GPU or a set of CPUs), one shard at a time.

``python -m multiview_plugin.driver.encode ... --dataset_number_of_shards N --encode_output_path emb/corpus.pkl
--ray_address auto`` encodes shards 0..N-1 into ``emb/corpus.<i>.pkl`` (the names the ``torchrun`` launch of
:mod:`multiview_plugin.encoding.parallel` uses). Each shard goes through :func:`encode_to_shard`, the loop the
sequential encode runs, so every shard and sidecar is byte for byte the one ``--dataset_shard_index i`` writes;
it is resumable the same way (a complete shard is skipped, an interrupted one resumes after its last checkpoint)
and guarded the same way (``<shard>.lock``, fingerprints). The outputs, the input and the model must be reachable
at the same paths from every node (a shared file system).

Naming: with ``--dataset_number_of_shards`` > 1 shard ``i`` goes to ``<stem>.<i><suffix>``; a single shard
goes to ``--encode_output_path`` itself, the file the sequential encode of the same command writes.

Faults are handled by Ray: a worker that dies (its process killed, its node lost) is restarted by Ray
(``max_restarts``) and the shard it was encoding is handed to it again by Ray (``max_task_retries``); the shard's
encode then resumes from its last checkpoint. A shard whose worker is lost for good (restarts used up), or that no
worker answers within ``timeout`` seconds, stops the run with one line naming the shard
(:class:`~multiview_plugin.ray_runtime.WorkerLostError`); the shards already written stay and a rerun resumes.
Before any worker is created the cluster's CPUs and GPUs are compared with what the workers reserve.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multiview_plugin.encoding.shards import ShardInfo
from multiview_plugin.errors import ConfigError
from multiview_plugin.ray_runtime import (
    DEFAULT_ENCODE_TIMEOUT,
    DEFAULT_MAX_RESTARTS,
    WorkerActor,
    WorkerLostError,
    actor_options,
    check_ray_number,
    check_resources,
    one_line,
    require_ray,
    unwrap_task_error,
)

logger = logging.getLogger("multiview_plugin.encode")


@dataclass(frozen=True)
class RayEncodeOptions:
    """How the Ray encode places its workers.

    ``workers``: actors (models) to start; 0: as many as the cluster's GPUs (``gpus_per_worker`` > 0) or CPUs
    hold, at most one per shard. ``cpus_per_worker`` / ``gpus_per_worker``: what each reserves (None GPUs: 1 when
    the cluster has GPUs, else 0). ``max_restarts``: how often a lost worker is restarted and its shard handed out
    again. ``timeout``: seconds to wait for a shard (or a restarted worker) before the run stops.
    """

    workers: int = 0
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    timeout: float = DEFAULT_ENCODE_TIMEOUT

    def __post_init__(self) -> None:
        check_ray_number(self.workers, "--ray_workers", inclusive=True)
        check_ray_number(self.cpus_per_worker, "--ray_cpus_per_worker")
        if self.gpus_per_worker is not None:
            check_ray_number(self.gpus_per_worker, "--ray_gpus_per_worker", inclusive=True)
        check_ray_number(self.max_restarts, "--ray_max_restarts", inclusive=True)
        check_ray_number(self.timeout, "--ray_timeout")


class EncodeWorker(WorkerActor):
    """A Ray actor holding one model; :meth:`encode` runs :func:`encode_to_shard` for one shard.

    ``load_model`` builds the model on the worker (the device Ray assigned: ``cuda`` when it gave this actor a
    GPU). An error while loading is kept and raised by every call, so it reaches the driver as itself."""

    def __init__(self, load_model: Callable[[str | None], Any], device: str | None):
        self.error: BaseException | None = None
        try:
            import torch

            dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
            self.model = load_model(dev)
        except Exception as err:  # noqa: BLE001 - re-raised by every call, see ping/encode
            self.error = err

    def encode(self, kwargs: dict[str, Any]) -> tuple[ShardInfo, bool]:
        """The shard's sidecar info, and whether Ray restarted this worker before this call (a lost worker's
        shard is handed to it again by Ray, and resumes from its last checkpoint)."""
        from multiview_plugin.encoding.encode import encode_to_shard

        self.ping()
        restarted = self.restarted()
        return encode_to_shard(self.model, **kwargs), restarted


def default_workers(ray: Any, options: RayEncodeOptions, num_shards: int, gpus: float) -> int:
    """Workers the cluster's resources hold (GPUs when the workers take GPUs, else CPUs), at most one per shard."""
    resources = ray.cluster_resources()
    fits = int(resources.get("CPU", 0) // options.cpus_per_worker)
    if gpus > 0:
        fits = min(fits, int(resources.get("GPU", 0) // gpus))
    if fits < 1:
        raise ConfigError(f"the Ray cluster has {resources.get('CPU', 0):g} CPUs and {resources.get('GPU', 0):g} "
                          f"GPUs: not enough for one encode worker ({options.cpus_per_worker:g} CPUs, {gpus:g} GPUs); "
                          "lower --ray_cpus_per_worker / --ray_gpus_per_worker or add nodes")
    return max(1, min(num_shards, fits))


def encode_on_ray(load_model: Callable[[str | None], Any], jobs: Sequence[tuple[int, str | os.PathLike]],
                  shard_kwargs: dict[str, Any], options: RayEncodeOptions, device: str | None = None
                  ) -> dict[int, ShardInfo]:
    """Encode ``jobs`` (shard index, output path) on the connected Ray cluster; returns each shard's sidecar info.

    ``load_model(device)`` builds the model (run once per worker, on its node); ``shard_kwargs``: the other
    keyword arguments of :func:`encode_to_shard` (path, num_shards, batch_size, ...), the same for every shard.
    """
    ray = require_ray()
    if not jobs:
        return {}
    gpus = options.gpus_per_worker
    if gpus is None:
        gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    n_workers = options.workers or default_workers(ray, options, len(jobs), gpus)
    n_workers = min(n_workers, len(jobs))
    check_resources(ray, n_workers, options.cpus_per_worker, gpus, "Ray encode workers",
                    "--ray_workers / --ray_cpus_per_worker / --ray_gpus_per_worker")
    remote = ray.remote(EncodeWorker).options(**actor_options(num_cpus=options.cpus_per_worker, num_gpus=gpus,
                                                               max_restarts=options.max_restarts))
    actors = [remote.remote(load_model, device) for _ in range(n_workers)]
    logger.info("Ray encode: %d shards on %d workers (%g CPUs, %g GPUs each)", len(jobs), n_workers,
                options.cpus_per_worker, gpus)
    try:
        return _run_pool(ray, actors, list(jobs), shard_kwargs, options)
    finally:
        for actor in actors:
            ray.kill(actor)


def _run_pool(ray: Any, actors: list[Any], jobs: list[tuple[int, str | os.PathLike]], shard_kwargs: dict[str, Any],
              options: RayEncodeOptions) -> dict[int, ShardInfo]:
    """Hand shards to idle workers until all are done. A worker lost mid-shard is restarted by Ray, which hands
    it the same shard again; a worker lost for good, or no answer in ``timeout`` seconds, stops the run."""
    pending = deque(jobs)
    idle = deque(actors)
    inflight: dict[Any, tuple[Any, int, str]] = {}
    done: dict[int, ShardInfo] = {}
    while pending or inflight:
        while pending and idle:
            actor = idle.popleft()
            shard, output = pending.popleft()
            ref = actor.encode.remote({**shard_kwargs, "shard_index": shard, "output": str(output)})
            inflight[ref] = (actor, shard, str(output))
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=options.timeout)
        if not ready:
            running = ", ".join(f"{shard} ({output})" for _, shard, output in inflight.values())
            raise WorkerLostError(f"shard(s) {running}: no answer from their Ray workers in {options.timeout:g} s "
                                  "(--ray_timeout); the shards written so far stay, rerun to resume")
        actor, shard, output = inflight.pop(ready[0])
        done[shard] = _shard_result(ray, ready[0], shard, output)
        idle.append(actor)
        logger.info("shard %d done (%s): %d of %d", shard, output, len(done), len(jobs))
    return done


def _shard_result(ray: Any, ref: Any, shard: int, output: str) -> ShardInfo:
    """One finished encode call: its sidecar info, or one line naming the shard whose worker was lost for good."""
    try:
        info, restarted = ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        raise unwrap_task_error(err) from None
    except ray.exceptions.RayActorError as err:
        raise WorkerLostError(f"shard {shard} ({output}): its Ray encode worker was lost and not restarted "
                              f"({type(err).__name__}: {one_line(err, 160)}); the shards written so far stay, rerun "
                              "to resume") from None
    except ray.exceptions.RayError as err:  # e.g. OutOfMemoryError: Ray's memory monitor killed the worker
        raise WorkerLostError(f"shard {shard} ({output}): its Ray encode worker failed ({type(err).__name__}: "
                              f"{one_line(err, 200)}); the shards written so far stay, rerun to resume") from None
    if restarted:
        logger.warning("shard %d (%s): its Ray encode worker was lost and restarted by Ray, which encoded the shard "
                       "again (resuming from its last checkpoint)", shard, output)
    return info


def check_ray_jobs(num_shards: int, shard_index: int, output: str | os.PathLike) -> list[tuple[int, Path]]:
    """The (shard, output path) pairs of a Ray encode of all ``num_shards`` shards."""
    from multiview_plugin.encoding.parallel import shard_output_path

    if shard_index:
        raise ConfigError("--ray_address encodes every shard of --dataset_number_of_shards: drop --dataset_shard_index")
    if num_shards == 1:  # the file the sequential encode of the same command writes
        return [(0, Path(output))]
    return [(i, shard_output_path(output, i)) for i in range(num_shards)]
