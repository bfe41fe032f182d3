"""What determines an encoded shard's bytes, as a flat JSON dict that resume, skip and index checks compare.

An interrupted encode resumes, and a finished shard is skipped, only when the new run has the same
fingerprint; the index and search drivers check that the shards they combine come from one model and form
complete sets. Fields:

* ``model_name``, ``model_weights`` (SHA-256 of the loaded parameters), ``model_config`` (SHA-256 of the
  model's ``multiview_config`` less its lengths), ``tokenizer`` (SHA-256 of the tokenizer's definition): the
  model, hashed as loaded, so a model folder that was moved or copied still matches and any other checkpoint
  does not.
* ``dtype``, ``max_len`` (the query or passage length used), ``is_query``, ``passage_field_separator``.
* ``shard_index``, ``num_shards``.
* ``input`` and ``pseudo_queries``: file identities (size plus SHA-256 of the first and last MiB): cheap,
  independent of path and modification time, and sensitive to appends, truncation and edits near either end.

Not included, on purpose: the batch size and the device. They change vectors only by float rounding, and
resuming with a smaller batch after running out of memory must stay possible.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FINGERPRINT_VERSION = 1
# the fields that identify the model: shards (and queries) searched together must agree on all of them
MODEL_FIELDS = ("model_name", "model_weights", "model_config", "tokenizer")
_EDGE_BYTES = 1 << 20


def file_identity(path: str | os.PathLike) -> str:
    """``"<size> bytes, sha256 <digest of the first and last MiB>"``: a content identity that costs two reads."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as f:
        digest.update(f.read(_EDGE_BYTES))
        if size > _EDGE_BYTES:
            f.seek(max(_EDGE_BYTES, size - _EDGE_BYTES))
            digest.update(f.read())
    return f"{size} bytes, sha256 {digest.hexdigest()[:16]}"


SAMPLE_BLOCKS, SAMPLE_BYTES = 64, 4096


def sampled_identity(path: str | os.PathLike) -> str:
    """``"<size> bytes, sampled sha256 <digest>"``: the size plus SHA-256 of the first and last 64 KiB and of
    :data:`SAMPLE_BLOCKS` blocks of 4 KiB spread evenly between them (the whole file when it is smaller):
    ~330 KiB read whatever the size, so an index folder's files are checked at every load. A file replaced by
    another of the same shape (other vectors) differs in its samples."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as f:
        if size <= 2 * 65_536 + SAMPLE_BLOCKS * SAMPLE_BYTES:
            digest.update(f.read())
        else:
            offsets = [0, *(65_536 + (size - 2 * 65_536) * i // SAMPLE_BLOCKS for i in range(SAMPLE_BLOCKS))]
            for offset in offsets:
                f.seek(offset)
                digest.update(f.read(65_536 if offset == 0 else SAMPLE_BYTES))
            f.seek(size - 65_536)
            digest.update(f.read())
    return f"{size} bytes, sampled sha256 {digest.hexdigest()[:16]}"


def _digest_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def weights_digest(module: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer (names, dtypes, shapes and bytes); tied tensors are hashed once."""
    import torch  # here, not at the top: the shard readers (and drivers' --help) import this module

    digest = hashlib.sha256()
    seen: dict[tuple[int, int], str] = {}
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach()
        key = (tensor.data_ptr(), tensor.numel())
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        if key in seen and tensor.numel():
            digest.update(f"same as {seen[key]}".encode())
            continue
        seen[key] = name
        digest.update(tensor.contiguous().cpu().reshape(-1).view(torch.uint8).numpy())  # no copy
    return digest.hexdigest()[:16]


def tokenizer_digest(tokenizer: Any) -> str:
    """SHA-256 of a tokenizer's full definition (fast tokenizers) or of its vocabulary and class."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        definition = json.loads(backend.to_str())
        for per_call in ("truncation", "padding"):  # set by each call's arguments, not part of the tokenizer
            definition.pop(per_call, None)
        return _digest_json(definition)
    return _digest_json([type(tokenizer).__name__, sorted(tokenizer.get_vocab().items())])


def model_fingerprint(model: Any) -> dict[str, Any]:
    """The model fields (:data:`MODEL_FIELDS`) of a loaded :class:`~multiview_plugin.modeling.MultiViewEncoder`."""
    config = model.config.to_dict()
    for length in ("query_max_len", "passage_max_len"):  # recorded as max_len, for the side actually encoded
        config.pop(length, None)
    return {"model_name": model.config.model_name, "model_weights": weights_digest(model),
            "model_config": _digest_json(config), "tokenizer": tokenizer_digest(model.tokenizer)}


def encode_fingerprint(model: Any, input_path: str | os.PathLike, *, is_query: bool, num_shards: int,
                       shard_index: int, dtype: str, separator: str, pseudo_queries: str | None) -> dict[str, Any]:
    """Everything that determines the bytes of one encoded shard (see the module docstring)."""
    pseudo = None
    if pseudo_queries and not is_query:
        pseudo = "; ".join(file_identity(p.strip()) for p in pseudo_queries.split(",") if p.strip())
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        **model_fingerprint(model),
        "dtype": dtype,
        "max_len": int(model.config.query_max_len if is_query else model.config.passage_max_len),
        "is_query": bool(is_query),
        "passage_field_separator": None if is_query else separator,
        "shard_index": int(shard_index),
        "num_shards": int(num_shards),
        "input": file_identity(input_path),
        "pseudo_queries": pseudo,
    }


def differing_fields(recorded: dict[str, Any], current: dict[str, Any], fields: Any = None) -> list[str]:
    """Names of the fields (all, or those in ``fields``) whose values differ between two fingerprints."""
    names = fields if fields is not None else [*current, *(k for k in recorded if k not in current)]
    return [k for k in names if recorded.get(k) != current.get(k)]


def describe_differences(recorded: dict[str, Any], current: dict[str, Any], fields: Any = None,
                         labels: tuple[str, str] = ("was", "now")) -> str:
    """``"dtype (was 'float32', now 'float16') and shard_index (was 0, now 1)"``; empty when they agree."""
    old, new = labels
    return " and ".join(f"{k} ({old} {recorded.get(k)!r}, {new} {current.get(k)!r})"
                        for k in differing_fields(recorded, current, fields))
