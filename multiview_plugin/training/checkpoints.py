"""Choosing the checkpoint to resume from: the newest *complete* one.

The HF Trainer writes ``checkpoint-N`` file by file (model, optimizer, scheduler, RNG state, and
``trainer_state.json`` last), so a crash during a save leaves a folder that looks newest but cannot resume
(or, without its optimizer, would resume differently). :func:`checkpoint_problems` checks that everything a
resume reads is present and not truncated, cheaply: JSON parses, safetensors headers agree with the file
sizes, torch's zip files have their central directory (written at the end). :func:`last_complete_checkpoint`
skips incomplete folders with a warning. :func:`rotate_own_checkpoints` applies ``--save_total_limit`` to the
checkpoints a run wrote, never to a ``checkpoint-N`` folder someone else put in its output folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from multiview_plugin.modeling.config import CONFIG_NAME

logger = logging.getLogger(__name__)

_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _safetensors_problem(path: Path) -> str | None:
    """None when the header parses and the data it describes fits the file exactly."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "truncated"
        (length,) = struct.unpack("<Q", head)
        if 8 + length > size:
            return "truncated header"
        try:
            header = json.loads(f.read(length))
        except ValueError:
            return "unreadable header"
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    return None if 8 + length + end == size else f"{size} bytes, header describes {8 + length + end}"


def _file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read back (None when it looks whole)."""
    if not path.is_file():
        return "missing"
    try:
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".safetensors":
            return _safetensors_problem(path)
        elif path.suffix in (".pt", ".pth", ".bin"):
            zipfile.ZipFile(path).close()  # torch.save's zip: its directory is the last thing written
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        return f"unreadable ({err})"
    return None


def _model_files(folder: Path) -> list[Path]:
    """The model folder's config and weight files (tied backbone in the folder, untied in subfolders), and a
    LoRA model's adapter files (what a LoRA run resumes from)."""
    weights = [p for p in folder.rglob("*") if p.suffix in _WEIGHT_SUFFIXES and p.name != "training_args.bin"]
    return list(dict.fromkeys([folder / CONFIG_NAME, *sorted(weights), *_adapter_files(folder)]))


def _adapter_files(folder: Path) -> list[Path]:
    """The adapter files a config that records LoRA training (``options["lora"]``) promises."""
    from multiview_plugin.modeling.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, OPTION, adapter_folders

    try:
        config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # reported as the config's own problem
    if not isinstance(config, dict) or OPTION not in (config.get("options") or {}):
        return []
    roots = adapter_folders(folder, untied=bool(config.get("untie_encoder"))).values()
    return [r / name for r in roots for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)]


def checkpoint_problems(folder: str | os.PathLike, optimizer_expected: bool = True) -> list[str]:
    """What is missing or truncated in ``folder`` for the Trainer to resume from it (empty: complete).

    ``optimizer_expected``: False for ``--save_only_model`` checkpoints (no optimizer, scheduler or RNG state).
    RNG states: at least one (``rng_state.pth``, or ``rng_state_<rank>.pth`` per process), all readable; the
    Trainer itself tolerates a different process count on resume, so this does not insist on one file per rank.
    """
    folder = Path(folder)
    files = [folder / TRAINER_STATE_NAME, *_model_files(folder)]
    if not any(p.suffix in _WEIGHT_SUFFIXES for p in files):
        return ["no model weights"]
    if optimizer_expected:
        rng_states = sorted(folder.glob("rng_state*.pth")) or [folder / "rng_state.pth"]
        files += [folder / OPTIMIZER_NAME, folder / SCHEDULER_NAME, *rng_states]
    problems = []
    for path in files:
        problem = _file_problem(path)
        if problem:
            problems.append(f"{path.relative_to(folder)} {problem}")
    return problems


def last_complete_checkpoint(output_dir: str | os.PathLike, optimizer_expected: bool = True) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` with nothing missing; incomplete ones are skipped with a
    warning (e.g. a crash during their save). None when there is none."""
    folders = [p for p in Path(output_dir).iterdir() if p.is_dir() and _CHECKPOINT_RE.match(p.name)]
    for folder in sorted(folders, key=lambda p: int(_CHECKPOINT_RE.match(p.name).group(1)), reverse=True):
        problems = checkpoint_problems(folder, optimizer_expected)
        if not problems:
            return str(folder)
        logger.warning("skipping incomplete checkpoint %s (%s); it was probably interrupted while saving",
                       folder, "; ".join(problems[:3]))
    return None


def rotate_own_checkpoints(output_dir: str | os.PathLike, limit: int | None, owned: Callable[[Path], bool],
                           keep: tuple[str | os.PathLike | None, ...] = ()) -> list[Path]:
    """Delete the oldest ``checkpoint-N`` folders of ``output_dir`` beyond ``limit``, counting and deleting only
    those ``owned`` says this run wrote (transformers' own rotation deletes every ``checkpoint-*`` folder, a
    user's too); the newest owned one and those in ``keep`` (e.g. the best) stay. Returns the deleted folders."""
    if not limit or limit <= 0 or not Path(output_dir).is_dir():
        return []
    folders = sorted((p for p in Path(output_dir).iterdir() if p.is_dir() and _CHECKPOINT_RE.match(p.name)),
                     key=lambda p: int(_CHECKPOINT_RE.match(p.name).group(1)))
    mine = []
    for folder in folders:
        if owned(folder):
            mine.append(folder)
        else:
            logger.info("%s was not written by this run: left in place (--save_total_limit counts this run's "
                        "checkpoints only)", folder)
    protected = {Path(k).resolve() for k in keep if k} | ({mine[-1].resolve()} if mine else set())
    deleted = []
    for folder in mine:
        if len(mine) - len(deleted) <= max(limit, len(protected)):
            break
        if folder.resolve() not in protected:
            logger.info("deleting %s (--save_total_limit %d)", folder, limit)
            shutil.rmtree(folder, ignore_errors=True)
            deleted.append(folder)
    return deleted


def checkpoint_step(folder: str | os.PathLike) -> int | None:
    """N of a ``checkpoint-N`` folder name; None for any other name."""
    match = _CHECKPOINT_RE.match(Path(folder).name)
    return int(match.group(1)) if match else None


def checkpoints_in_the_way(output_dir: str | os.PathLike, after_step: int, until_step: int | None,
                           is_this_runs: Callable[[Path], bool]) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir`` that a run saving steps ``after_step < N <= until_step``
    (``until_step`` None: no known end) would write into although ``is_this_runs`` says they are not its own.
    The Trainer saves into an existing folder without a word, and the run would then count it as its own."""
    if not Path(output_dir).is_dir():
        return []
    found = []
    for folder in sorted(Path(output_dir).iterdir()):
        step = checkpoint_step(folder) if folder.is_dir() else None
        if step is None or step <= after_step or (until_step is not None and step > until_step):
            continue
        if not is_this_runs(folder):
            found.append(folder)
    return found
