"""training/resume.py: resuming and guarding a train run's --output_dir, on plain argument objects (resuming
and refusing real checkpoints run through the train driver in tests/driver/test_train.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.training.resume import checkpoint_to_resume, one_trainer, run_is_finished
from multiview_plugin.training.run_settings import save_run_settings


def args(tmp_path, **kwargs):
    base = dict(output_dir=str(tmp_path / "out"), overwrite_output_dir=False, resume_from_checkpoint=None,
                save_only_model=False, max_steps=-1, process_index=0)
    return SimpleNamespace(**{**base, **kwargs})


def test_an_empty_output_dir_resumes_nothing(tmp_path):
    assert checkpoint_to_resume(args(tmp_path), {}) is None


def test_an_explicit_missing_checkpoint_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="--resume_from_checkpoint .*no such folder"):
        checkpoint_to_resume(args(tmp_path, resume_from_checkpoint=str(tmp_path / "checkpoint-9")))


def test_resume_true_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--resume_from_checkpoint true: no complete checkpoint"):
        checkpoint_to_resume(args(tmp_path, resume_from_checkpoint="true"))


def test_a_finished_run_with_the_same_settings_is_recognised(tmp_path):
    settings = {"learning_rate": 1e-5, "max_steps": 10, "num_train_epochs": 3.0}
    assert not run_is_finished(args(tmp_path), settings)
    save_run_settings(tmp_path / "out", settings)
    assert run_is_finished(args(tmp_path), settings)
    assert not run_is_finished(args(tmp_path), {**settings, "max_steps": 20})  # a longer run continues
    assert not run_is_finished(args(tmp_path, overwrite_output_dir=True), settings)


def test_only_the_main_process_takes_the_lock(tmp_path):
    (tmp_path / "out").mkdir()
    with one_trainer(args(tmp_path, process_index=1)):
        assert not list(tmp_path.glob("*.lock"))
    with one_trainer(args(tmp_path)):
        pass
