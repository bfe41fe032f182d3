"""A training run's settings, saved with every checkpoint, so that a rerun resumes only the *same* run.

``multiview_run.json`` (in ``--output_dir`` and in each ``checkpoint-N``) records every parsed option of the
train driver. Rerunning into an existing ``--output_dir`` resumes its newest complete checkpoint only when the
new options equal the recorded ones, except :data:`MAY_DIFFER_ON_RESUME` (where output goes, how often it is
logged or saved, how long training lasts, data-loading workers); otherwise the run stops and names the first
option that differs (``--overwrite_output_dir`` trains afresh instead). A checkpoint written before this file
existed is checked against its ``multiview_config.json`` (method and method options) and a warning says the
other options could not be checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from multiview_plugin.atomic import atomic_open
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.config import CONFIG_NAME

logger = logging.getLogger(__name__)

RUN_SETTINGS_FILE = "multiview_run.json"
RUN_SETTINGS_VERSION = 1

# Options a resumed run may change: where things go and how often they are logged or saved, how long the
# run lasts (extending it: the learning-rate schedule then follows the new length), data-loading and
# process plumbing, and caches. Everything else (model, method options, data, batch, optimiser, seed ...)
# must match the checkpoint's run.
MAY_DIFFER_ON_RESUME = frozenset({
    "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "logging_dir", "run_name", "report_to",
    "disable_tqdm", "log_level", "log_level_replica", "log_on_each_node", "logging_steps", "logging_strategy",
    "logging_first_step", "logging_nan_inf_filter", "save_steps", "save_strategy", "save_total_limit",
    "save_on_each_node", "save_safetensors", "save_only_model", "num_train_epochs", "max_steps",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_prefetch_factor",
    "dataloader_persistent_workers", "local_rank", "ddp_timeout", "ddp_backend", "num_proc", "dataset_cache_dir",
    "cache_dir", "per_device_eval_batch_size", "push_to_hub", "hub_model_id", "hub_strategy", "hub_token",
    "hub_private_repo", "hub_always_push", "hub_revision", "skip_memory_metrics", "dev_patience",
})


def run_settings(*parsed: Any) -> dict[str, Any]:
    """Every option of the parsed dataclasses (``TrainingArguments`` via ``to_dict``), JSON-normalised."""
    out: dict[str, Any] = {}
    for obj in parsed:
        values = obj.to_dict() if hasattr(obj, "to_dict") else (asdict(obj) if is_dataclass(obj) else dict(obj))
        out.update(values)
    return json.loads(json.dumps(out, default=str, sort_keys=True))


INPUTS_KEY = "input_files"  # {"--flag path": "<size> bytes, sha256 <digest>"} of the run's data files


def input_fingerprints(files: dict[str, Any]) -> dict[str, str]:
    """Size and SHA-256 of every data file a run reads (``{flag: path or comma-separated paths}``; names that are
    not files, e.g. Hub datasets, are left out), so that a run resumes only on the data it was trained on. The
    whole file is hashed: the training driver reads all of it anyway."""
    out = {}
    for flag, value in files.items():
        for path in (value if isinstance(value, (list, tuple)) else str(value or "").split(",")):
            path = str(path).strip()
            if path and os.path.isfile(path):
                with open(path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
                out[f"{flag} {path}"] = f"{os.path.getsize(path)} bytes, sha256 {digest[:16]}"
    return out


def save_run_settings(folder: str | os.PathLike, settings: dict[str, Any]) -> Path:
    path = Path(folder) / RUN_SETTINGS_FILE
    with atomic_open(path) as f:
        json.dump({"version": RUN_SETTINGS_VERSION, "settings": settings}, f, indent=2, sort_keys=True)
        f.write("\n")
    return path


def load_run_settings(folder: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(folder) / RUN_SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:
        raise ConfigError(f"{path}: unreadable run settings ({' '.join(str(err).split())}); pass "
                          "--overwrite_output_dir to train afresh") from None
    settings = data.get("settings") if isinstance(data, dict) else None
    inputs = settings.get(INPUTS_KEY, {}) if isinstance(settings, dict) else None
    if not isinstance(settings, dict) or not isinstance(inputs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        what = ("field 'settings': expected an object" if not isinstance(settings, dict) else
                f"field 'settings.{INPUTS_KEY}': expected an object of file fingerprints")
        raise ConfigError(f"{path}: {what} (edited, or not written by the train driver?); pass "
                          "--overwrite_output_dir to train afresh")
    return dict(settings)


def first_difference(recorded: dict[str, Any], current: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """(option, recorded value, current value) of the first option (alphabetically) that differs, ignoring
    :data:`MAY_DIFFER_ON_RESUME`; None when the runs agree."""
    for name in sorted(set(recorded) | set(current)):
        if name in MAY_DIFFER_ON_RESUME or (name == INPUTS_KEY and name not in recorded):  # older runs: unknown
            continue
        old, new = recorded.get(name, "<unset>"), current.get(name, "<unset>")
        if old != new:
            return name, old, new
    return None


def check_resume(checkpoint: str | os.PathLike, current: dict[str, Any]) -> None:
    """Refuse to resume ``checkpoint`` with options other than its run's (see the module docstring)."""
    recorded = load_run_settings(checkpoint)
    if recorded is None:
        _check_model_config(Path(checkpoint), current)
        return
    if INPUTS_KEY in recorded or INPUTS_KEY not in current:
        old_files, new_files = recorded.get(INPUTS_KEY) or {}, current.get(INPUTS_KEY) or {}
        for name in sorted(set(old_files) | set(new_files)):
            if old_files.get(name) != new_files.get(name):
                raise ConfigError(f"{checkpoint} was trained on {name} as it was then "
                                  f"({old_files.get(name, 'not an input of that run')}); now "
                                  f"{new_files.get(name, 'not an input of this run')}: the data changed, and "
                                  "resuming would mix two datasets; pass --overwrite_output_dir to train afresh (or "
                                  "use another --output_dir)")
    else:  # a checkpoint from before the data was fingerprinted
        logger.warning("%s records no fingerprint of its data files (written by an older version): cannot check "
                       "that they are unchanged", checkpoint)
        current = {k: v for k, v in current.items() if k != INPUTS_KEY}
    diff = first_difference(recorded, current)
    if diff is not None:
        name, old, new = diff
        raise ConfigError(f"{checkpoint} was trained with --{name} {_show(old)}, this run has {_show(new)}: "
                          "resuming would mix two runs; pass --overwrite_output_dir to train afresh (or use "
                          "another --output_dir)")
    for name in ("num_train_epochs", "max_steps"):
        if recorded.get(name) != current.get(name):
            logger.info("resuming with --%s %s (was %s): the learning-rate schedule follows the new length",
                        name, current.get(name), recorded.get(name))


def _check_model_config(checkpoint: Path, current: dict[str, Any]) -> None:
    """A checkpoint from before run settings were saved: compare the method and its options at least."""
    try:
        config = json.loads((checkpoint / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    pairs = [("model_name", config.get("model_name"))]
    pairs += sorted((config.get("options") or {}).items())
    for name, old in pairs:
        if name in current and old is not None and old != current[name]:
            raise ConfigError(f"{checkpoint} was trained with --{name} {_show(old)}, this run has "
                              f"{_show(current[name])}: pass --overwrite_output_dir to train afresh")
    logger.warning("%s records no run settings (%s, written by an older version): only the method and its "
                   "options were checked before resuming it", checkpoint, RUN_SETTINGS_FILE)


def _show(value: Any) -> str:
    return "(unset)" if value is None else str(value)


def written_by_train(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a readable ``multiview_run.json`` (the train driver wrote it, whatever its
    settings); a folder without one, or with an edited one, is someone else's."""
    try:
        return load_run_settings(folder) is not None
    except ConfigError:
        return False


def previous_run_files(output_dir: str | os.PathLike) -> list[str]:
    """What in ``output_dir`` a previous training run wrote (config, run settings, trainer state)."""
    folder = Path(output_dir)
    return [name for name in (CONFIG_NAME, RUN_SETTINGS_FILE, "trainer_state.json") if (folder / name).is_file()]


class RunSettingsCallback(TrainerCallback):
    """Writes ``multiview_run.json`` into every checkpoint the Trainer saves (main process only)."""

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                save_run_settings(folder, self.settings)
        return control


__all__ = ["INPUTS_KEY", "MAY_DIFFER_ON_RESUME", "RUN_SETTINGS_FILE", "RunSettingsCallback", "check_resume",
           "first_difference", "input_fingerprints", "load_run_settings", "previous_run_files", "run_settings",
           "save_run_settings", "written_by_train"]
