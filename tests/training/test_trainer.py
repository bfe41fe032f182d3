"""Tests of multiview_plugin/training/trainer.py: the Trainer for multi-view encoders (training end to end:
tests/driver/test_train.py; checkpoint rotation: tests/training/test_checkpoints.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments, MultiViewTrainingArguments
from multiview_plugin.data.dataset import TrainCollator
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.training.run_settings import save_run_settings
from multiview_plugin.training.trainer import EpochCallback, MultiViewTrainer


@pytest.fixture
def trainer(tiny_bert, tmp_path):
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=2),
        DataArguments(passage_max_len=32, query_max_len=16))
    args = MultiViewTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    return MultiViewTrainer(model=model, args=args, run_settings={"seed": 7, "learning_rate": 1e-5})


def test_epoch_callback_tells_the_model_and_the_dataset():
    seen = []
    model = SimpleNamespace(set_epoch=lambda e: seen.append(("model", e)), temperature=0.5)
    dataset = SimpleNamespace(set_epoch=lambda e: seen.append(("dataset", e)))
    callback = EpochCallback(dataset)
    callback.on_train_begin(None, SimpleNamespace(epoch=None), None, model=model)
    callback.on_epoch_begin(None, SimpleNamespace(epoch=2.0), None, model=model)
    assert seen == [("model", 0), ("dataset", 0), ("model", 2), ("dataset", 2)]


def test_the_logged_loss_carries_its_parts_and_the_temperature(trainer):
    batch = TrainCollator(trainer.model.formatter)([
        {"query": "what is paris", "passages": ["paris is the capital of france", "the moon is small"]},
        {"query": "where is rome", "passages": ["rome is the old capital of italy", "a cat is small"]}])
    loss = trainer.compute_loss(trainer.model, batch).detach()
    trainer.log({"loss": loss.item()})
    logged = trainer.state.log_history[-1]
    assert logged["temperature"] == pytest.approx(float(trainer.model.temperature), abs=1e-6)
    assert {"loss", "temperature"} < set(logged) and len(logged) > 2  # the loss parts, averaged
    trainer.log({"eval_x": 1.0})
    assert "temperature" not in trainer.state.log_history[-1]


def test_only_checkpoints_of_this_run_are_owned(trainer, tmp_path):
    ours, other, broken = (tmp_path / name for name in ("checkpoint-1", "checkpoint-2", "checkpoint-3"))
    for folder in (ours, other, broken):
        folder.mkdir()
    save_run_settings(ours, {"seed": 7, "learning_rate": 1e-5, "output_dir": "elsewhere"})
    save_run_settings(other, {"seed": 8, "learning_rate": 1e-5})
    (broken / "multiview_run.json").write_text("{not json")
    assert trainer.owns_checkpoint(ours)
    assert not trainer.owns_checkpoint(other) and not trainer.owns_checkpoint(broken)
    assert not trainer.owns_checkpoint(tmp_path / "checkpoint-4")  # no settings: never this run's
    trainer.saved_checkpoints.add((tmp_path / "checkpoint-4").resolve())
    assert trainer.owns_checkpoint(tmp_path / "checkpoint-4")
