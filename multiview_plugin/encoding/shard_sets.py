"""Checks that the shards searched or indexed together are complete sets made by one model.

Every sidecar records its ``shard_index`` of ``num_shards`` and a fingerprint (encoding/fingerprint.py). Shards
of one encode run (same input file, lengths and shard count) form a set; every set must hold each of its
shards exactly once. Several complete sets (e.g. two corpora encoded by the same model) may be combined.
Shards made by another model are refused always (their scores are not comparable); a missing shard, or a
shard without a sidecar, only unless ``allow_partial``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from multiview_plugin.encoding.fingerprint import MODEL_FIELDS, describe_differences
from multiview_plugin.encoding.shards import ShardFormatError, ShardInfo, read_info, read_shard, shard_view_ids

logger = logging.getLogger(__name__)

# fields that may differ between the shards of one set
_PER_SHARD = ("shard_index", "dtype")


def model_identity(info: ShardInfo) -> dict[str, Any]:
    """The model fields of a sidecar (just the model name for sidecars without a fingerprint)."""
    if info.fingerprint is None:
        return {"model_name": info.model_name}
    return {k: info.fingerprint.get(k) for k in MODEL_FIELDS}


def check_same_model(reference: tuple[str, dict[str, Any]], other: tuple[str, dict[str, Any]]) -> None:
    """Refuse when two model identities (``(where, model_identity)``) disagree on a field both record."""
    (ref_where, ref), (where, ident) = reference, other
    shared = [k for k in MODEL_FIELDS if k in ref and k in ident]
    differences = describe_differences(ref, ident, shared, labels=(Path(ref_where).name, Path(where).name))
    if differences:
        raise ShardFormatError(f"{where} was made by another model than {ref_where}: different {differences}; "
                               "vectors of different models cannot be searched together")


def _set_key(info: ShardInfo) -> str:
    if info.fingerprint is None:
        return json.dumps({"source": info.source, "num_shards": info.num_shards})
    return json.dumps({k: v for k, v in sorted(info.fingerprint.items()) if k not in _PER_SHARD})


def check_shard_set(paths: Sequence[str | os.PathLike], allow_partial: bool = False) -> list[ShardInfo | None]:
    """Validate the passage shards given together (see the module docstring); returns their sidecars.

    Raises :class:`ShardFormatError` naming foreign, duplicate or missing shards; with ``allow_partial``
    missing shards and shards without a sidecar are logged as warnings instead.
    """
    paths = [str(p) for p in paths]
    infos = [read_info(p) for p in paths]
    known = [(p, i) for p, i in zip(paths, infos) if i is not None]
    if not known:  # plain Tevatron pickles: each is warned about as it is read (shards.shard_view_ids)
        return infos
    problems = [f"{p} has no sidecar ({p}.json), so it cannot be checked to belong with the others"
                for p, i in zip(paths, infos) if i is None]
    for where, info in known[1:]:
        check_same_model((known[0][0], model_identity(known[0][1])), (where, model_identity(info)))
    groups: dict[str, list[tuple[str, ShardInfo]]] = {}
    for where, info in known:
        groups.setdefault(_set_key(info), []).append((where, info))
    for members in groups.values():
        num_shards = members[0][1].num_shards
        by_index: dict[int, str] = {}
        for where, info in members:
            if not 0 <= info.shard_index < num_shards:
                raise ShardFormatError(f"{where}: shard_index {info.shard_index} is not in [0, {num_shards})")
            if info.shard_index in by_index:
                raise ShardFormatError(f"{by_index[info.shard_index]} and {where} are both shard "
                                       f"{info.shard_index} of {num_shards} of {info.source or 'one input'}")
            by_index[info.shard_index] = where
        missing = sorted(set(range(num_shards)) - set(by_index))
        if missing:
            have = ", ".join(by_index[i] for i in sorted(by_index))
            problems.append(f"shard(s) {', '.join(map(str, missing))} of {num_shards} of "
                            f"{members[0][1].source or 'one input'} missing (have {have})")
    if problems and not allow_partial:
        raise ShardFormatError("incomplete shard set: " + "; ".join(problems) + ". Encode the missing shards, or "
                               "pass --allow_partial to use the shards given")
    for problem in problems:
        logger.warning("--allow_partial: %s", problem)
    return infos


def load_query_reps(path: str, unsafe_pickle: bool = False, passages: tuple[str, dict | None] | None = None,
                    dim: int | None = None) -> tuple[np.ndarray, list[str]]:
    """Query vectors and ids; ``passages`` = (where, model identity) of the passages they will be searched
    against, ``dim`` their vector dim when known: a query shard of another model, or of another dim, is refused.
    A query pickle without a sidecar is read by :func:`~multiview_plugin.encoding.shards.shard_view_ids` (one
    row per query, a warning that its model cannot be checked)."""
    reps, lookup, info = read_shard(path, unsafe_pickle)
    if info is not None and not info.is_query:
        raise ShardFormatError(f"{path} holds passages; encode queries with --encode_is_query")
    where = passages[0] if passages is not None else None
    shard_view_ids(path, lookup, info, is_query=True, checked_against=where)
    if passages is not None and passages[1] is not None and info is not None:
        check_same_model(passages, (path, model_identity(info)))
    elif passages is not None and passages[1] is None and info is not None:
        logger.warning("%s records no model fingerprint (built from shards without sidecars): cannot check that "
                       "the model of %s made it", where, path)
    check_query_dim(path, reps, dim, where)
    return np.asarray(reps, dtype=np.float32), lookup


def check_query_dim(path: str, reps: np.ndarray, dim: int | None, where: str | None = None) -> None:
    """Refuse query vectors whose dim is not ``dim`` (that of the passages or index at ``where``; None: unknown)."""
    if dim is not None and len(reps) and reps.shape[1] != dim:
        raise ShardFormatError(f"{path}: query vectors of dim {reps.shape[1]}, but the index expects (N, {dim})"
                               f"{f' ({where})' if where else ''}: encoded by another model?")
