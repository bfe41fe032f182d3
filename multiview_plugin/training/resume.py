"""Resuming and guarding a train run's ``--output_dir``: the checkpoint to resume (only a complete one of the same
run), the checkpoint folders in the way refused, a finished run recognised, and one trainer per folder at a time.
The train driver calls these before it builds the model."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import OutputLock

# the train driver's MultiViewTrainingArguments (arguments.py, a floor above)
MultiViewTrainingArguments = Any

logger = logging.getLogger("multiview_plugin.train")


def checkpoint_to_resume(training_args: MultiViewTrainingArguments, settings: dict[str, Any] | None = None
                         ) -> str | None:
    """An explicit --resume_from_checkpoint folder (refused if incomplete), else the newest complete checkpoint
    in --output_dir (an interrupted run continues; half-saved checkpoints are skipped with a warning).

    ``settings`` (:func:`~multiview_plugin.training.run_settings.run_settings` of this run): the checkpoint is
    resumed only when its run had the same options (else one line names the first that differs); and an
    ``--output_dir`` holding a previous run's model but no checkpoint to resume is refused. Without
    ``--overwrite_output_dir`` nothing of a previous run is trained over.
    """
    from multiview_plugin.training.checkpoints import checkpoint_problems, last_complete_checkpoint
    from multiview_plugin.training.run_settings import check_resume, previous_run_files

    expect = dict(optimizer_expected=not training_args.save_only_model)
    requested = training_args.resume_from_checkpoint
    if requested is not None and str(requested).lower() != "true":
        problems = checkpoint_problems(requested, **expect) if Path(requested).is_dir() else ["no such folder"]
        if problems:
            raise ConfigError(f"--resume_from_checkpoint {requested}: incomplete checkpoint ({'; '.join(problems)})")
        if settings is not None:
            check_resume(requested, settings)
        return requested
    output_dir = Path(training_args.output_dir)
    resume = None
    if not training_args.overwrite_output_dir and output_dir.is_dir():
        resume = last_complete_checkpoint(output_dir, **expect)
        if resume and settings is not None:
            check_resume(resume, settings)
        elif not resume and settings is not None and (found := previous_run_files(output_dir)):
            raise ConfigError(f"--output_dir {output_dir} holds a previous run ({', '.join(found)}) and no complete "
                              "checkpoint to resume: pass --overwrite_output_dir to train afresh over it, or use "
                              "another --output_dir")
    if resume:
        logger.info("resuming from %s", resume)
    elif requested is not None:
        raise ConfigError(f"--resume_from_checkpoint true: no complete checkpoint in {output_dir}")
    return resume


def refuse_checkpoints_in_the_way(training_args: MultiViewTrainingArguments, settings: dict[str, Any],
                                  resume: str | None) -> None:
    """Refuse, before training, a ``checkpoint-N`` folder in ``--output_dir`` that this run would save into (N
    after the resumed step, up to ``--max_steps``) and that is not its own: a user's folder, or another run's
    (with ``--overwrite_output_dir``, any folder the train driver wrote is this run's to replace). The Trainer
    would write into it, count it as the run's, and ``--save_total_limit`` would delete it."""
    from multiview_plugin.training.checkpoints import checkpoint_step, checkpoints_in_the_way
    from multiview_plugin.training.run_settings import first_difference, load_run_settings, written_by_train

    def is_this_runs(folder: Path) -> bool:
        if not written_by_train(folder):
            return False
        return training_args.overwrite_output_dir or first_difference(load_run_settings(folder), settings) is None

    after = (checkpoint_step(resume) or 0) if resume else 0
    until = training_args.max_steps if training_args.max_steps > 0 else None
    found = checkpoints_in_the_way(training_args.output_dir, after, until, is_this_runs)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(f"--output_dir {training_args.output_dir} holds {found[0].name}{more}, not written by this "
                          "run: training would save a checkpoint into it (and --save_total_limit could delete it); "
                          "move it away, or choose another --output_dir")


@contextlib.contextmanager
def one_trainer(training_args: MultiViewTrainingArguments) -> Iterator[None]:
    """``<output_dir>.lock`` held by the run's main process while it trains: a second train of the same
    ``--output_dir`` started meanwhile is refused in one line (two runs would save checkpoints into one folder and
    each rotate the other's); the other processes of a distributed run write nothing there and take no lock."""
    if training_args.process_index != 0:
        yield
        return
    with OutputLock(Path(training_args.output_dir).resolve()):
        yield


def run_is_finished(training_args: MultiViewTrainingArguments, settings: dict[str, Any]) -> bool:
    """Whether ``--output_dir`` holds the final model of a run with these very settings and the same length
    (its ``multiview_run.json`` is written after the final save). The Trainer, resumed from a run's last
    checkpoint, would train one step past its end instead of none."""
    from multiview_plugin.training.run_settings import first_difference, load_run_settings

    if training_args.overwrite_output_dir or training_args.resume_from_checkpoint:
        return False
    recorded = load_run_settings(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
    return recorded is not None and first_difference(recorded, settings) is None and all(
        recorded.get(k) == settings.get(k) for k in ("max_steps", "num_train_epochs"))
