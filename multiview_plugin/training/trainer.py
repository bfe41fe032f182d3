"""A ``transformers.Trainer`` for multi-view encoders."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.training.run_settings import written_by_train

logger = logging.getLogger(__name__)


class EpochCallback(TrainerCallback):
    """At every epoch start (and when a run starts or resumes), tell the model and the dataset the epoch:
    the model updates its temperature schedule, the dataset its sampling."""

    def __init__(self, dataset: Any = None):
        self.dataset = dataset

    def _apply(self, state, model) -> None:
        epoch = int(state.epoch or 0)
        if model is not None:
            model.set_epoch(epoch)
        if self.dataset is not None and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
        logger.info("epoch %d: temperature %.4f", epoch, getattr(model, "temperature", float("nan")))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._apply(state, model)

    def on_epoch_begin(self, args, state, control, model=None, **kwargs):
        self._apply(state, model)


class MultiViewTrainer(Trainer):
    """Trains a :class:`MultiViewEncoder`: logs the loss parts and temperature, saves and resumes in the
    model's own folder format (so every checkpoint is a loadable model).

    ``--save_total_limit`` deletes only checkpoints this run wrote: those this process saved, and, given
    ``run_settings`` (the run's :func:`~multiview_plugin.training.run_settings.run_settings`), those whose
    ``multiview_run.json`` records the same run (an interrupted run's, resumed); never another ``checkpoint-N``
    folder in the output folder."""

    def __init__(self, *args: Any, run_settings: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.run_settings = run_settings
        self.saved_checkpoints: set[Path] = set()
        self.model.negatives_x_device = bool(getattr(self.args, "negatives_x_device", False))
        self._parts_sum: dict[str, float] = {}
        self._parts_count = 0

    def create_optimizer(self, model=None):
        """The Trainer's optimizer, with the parameters named by the encoder's
        :meth:`~MultiViewEncoder.learning_rate_overrides` (e.g. MVR's residual view gates) moved into groups of
        their own learning rate; the scheduler scales every group alike (warm-up, decay)."""
        optimizer = super().create_optimizer(model)
        overrides = self._unwrapped().learning_rate_overrides()
        if not overrides or getattr(self, "_overrides_applied", False):
            return optimizer
        named = dict(self._unwrapped().named_parameters())
        moved = {id(named[name]): (name, lr) for name, lr in overrides.items() if name in named}
        for group in list(optimizer.param_groups):
            special = [q for q in group["params"] if id(q) in moved]
            if not special:
                continue
            group["params"] = [q for q in group["params"] if id(q) not in moved]
            for param in special:
                name, lr = moved[id(param)]
                optimizer.add_param_group({**{k: v for k, v in group.items() if k != "params"},
                                           "params": [param], "lr": lr, "initial_lr": lr})
                logger.info("learning rate %g for %s", lr, name)
        optimizer.param_groups[:] = [g for g in optimizer.param_groups if g["params"]]
        self._overrides_applied = True
        return optimizer

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        out = model(**inputs)  # query, passage, and any method-specific inputs its collator adds
        for name, value in out.parts.items():
            self._parts_sum[name] = self._parts_sum.get(name, 0.0) + float(value)
        self._parts_count += 1
        return (out.loss, out) if return_outputs else out.loss

    def training_step(self, model, inputs, num_items_in_batch=None) -> torch.Tensor:
        if not getattr(self.args, "grad_cache", False):
            return super().training_step(model, inputs, num_items_in_batch)
        from multiview_plugin.training.grad_cache import grad_cache_step

        model.train()
        inputs = self._prepare_inputs(inputs)
        # the mean over accumulated batches, as Trainer's own step
        steps = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)

        def backward(loss: torch.Tensor) -> None:
            self.accelerator.backward(loss / steps)

        with self.compute_loss_context_manager():
            out = grad_cache_step(model, inputs, self.args.gc_q_chunk_size, self.args.gc_p_chunk_size, backward)
        for name, value in out.parts.items():
            self._parts_sum[name] = self._parts_sum.get(name, 0.0) + float(value)
        self._parts_count += 1
        return out.loss / steps

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if "loss" in logs and self._parts_count:
            for name, total in self._parts_sum.items():
                logs[name] = round(total / self._parts_count, 6)
            self._parts_sum, self._parts_count = {}, 0
        if "loss" in logs:
            logs["temperature"] = round(float(self._unwrapped().temperature), 6)
        super().log(logs, *args, **kwargs)

    def _unwrapped(self) -> MultiViewEncoder:
        model = self.model
        return model.module if hasattr(model, "module") else model

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        output_dir = output_dir or self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        logger.info("saving model to %s", output_dir)
        self._unwrapped().save(output_dir)
        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def _save_checkpoint(self, model, trial) -> None:
        from multiview_plugin.training.checkpoints import rotate_own_checkpoints

        target = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if target.exists() and not self.may_write_checkpoint(target):
            from multiview_plugin.errors import ConfigError

            raise ConfigError(f"{target} exists and was not written by this run: refusing to save a checkpoint into "
                              "it (move it away, or choose another --output_dir)")
        limit = self.args.save_total_limit
        self.args.save_total_limit = None  # transformers' rotation would delete every checkpoint-* folder
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        run_dir = self._get_output_dir(trial=trial)
        self.saved_checkpoints.add((Path(run_dir) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}").resolve())
        if self.args.should_save:
            rotate_own_checkpoints(run_dir, limit, self.owns_checkpoint, keep=(self.state.best_model_checkpoint,))

    def may_write_checkpoint(self, folder: Path) -> bool:
        """Whether saving into the existing ``folder`` is allowed: one of this run's, or, with
        ``--overwrite_output_dir``, one an earlier run of the train driver wrote (it records its settings)."""
        if self.owns_checkpoint(folder):
            return True
        return bool(self.args.overwrite_output_dir) and written_by_train(folder)

    def owns_checkpoint(self, folder: Path) -> bool:
        """Whether this run wrote ``folder`` (see the class docstring)."""
        if folder.resolve() in self.saved_checkpoints:
            return True
        if self.run_settings is None:
            return False
        from multiview_plugin.errors import ConfigError
        from multiview_plugin.training.run_settings import first_difference, load_run_settings

        try:
            recorded = load_run_settings(folder)
        except ConfigError:
            return False
        return recorded is not None and first_difference(recorded, self.run_settings) is None

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        logger.info("loading weights from checkpoint %s", resume_from_checkpoint)
        (model or self._unwrapped()).load_weights(resume_from_checkpoint)
