"""Encoding several shards at once: one process per device under ``torchrun``, no process group needed.

``torchrun --nproc_per_node W -m multiview_plugin.driver.encode ... --dataset_number_of_shards N
--encode_output_path emb/corpus.pkl`` starts W processes; process r (``RANK``) encodes shards r, r+W, r+2W, ...
of the N, each into ``emb/corpus.<shard>.pkl``, on device ``cuda:<LOCAL_RANK>`` when CUDA is available. Shards
are independent, so the processes never communicate (any backend, or none), and each shard is the same file a
sequential ``--dataset_shard_index i`` run writes, resumable the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from multiview_plugin.errors import ConfigError


@dataclass(frozen=True)
class LaunchRank:
    rank: int
    world_size: int
    local_rank: int

    @property
    def parallel(self) -> bool:
        return self.world_size > 1


def launch_rank(env: dict[str, str] | None = None) -> LaunchRank:
    """This process's place among those ``torchrun`` started (RANK, WORLD_SIZE, LOCAL_RANK; 0/1/0 alone)."""
    env = os.environ if env is None else env
    try:
        rank, world = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))
        local = int(env.get("LOCAL_RANK", rank))
    except ValueError as err:
        raise ConfigError(f"RANK / WORLD_SIZE / LOCAL_RANK must be integers ({err})") from err
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK {rank} is not in [0, WORLD_SIZE {world})")
    return LaunchRank(rank, world, local)


def rank_shards(num_shards: int, launch: LaunchRank) -> list[int]:
    """The shard indices process ``launch.rank`` encodes: rank, rank + W, ... (< num_shards)."""
    if num_shards < launch.world_size:
        raise ConfigError(f"--dataset_number_of_shards {num_shards} is smaller than the {launch.world_size} "
                          "processes: pass at least one shard per process")
    return list(range(launch.rank, num_shards, launch.world_size))


def shard_output_path(path: str | os.PathLike, shard: int) -> Path:
    """``emb/corpus.pkl`` → ``emb/corpus.<shard>.pkl`` (the shard index before the suffix)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.{shard}{path.suffix}")
