"""Choosing the newest complete checkpoint (training/checkpoints.py); see also tests/driver/test_train.py."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import FAST, bounded, workdir


def test_checkpoint_completeness_checks(tmp_path):
    from safetensors.torch import save_file

    from multiview_plugin.training.checkpoints import checkpoint_problems, last_complete_checkpoint

    def checkpoint(step: int, optimizer: bool = True) -> Path:
        folder = tmp_path / f"checkpoint-{step}"
        (folder / "passage_model").mkdir(parents=True)  # untied encoders: weights in subfolders
        save_file({"w": torch.ones(4, 4)}, str(folder / "passage_model" / "model.safetensors"))
        (folder / "multiview_config.json").write_text("{}")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        if optimizer:
            for name in ("optimizer.pt", "scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"):
                torch.save({"x": torch.zeros(3)}, folder / name)
        return folder

    good, newest = checkpoint(5), checkpoint(10)
    assert checkpoint_problems(good) == [] and checkpoint_problems(newest) == []
    weights = newest / "passage_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # cut short while saving
    (newest / "rng_state_1.pth").write_bytes(b"")
    size = weights.stat().st_size
    assert checkpoint_problems(newest) == [
        f"passage_model/model.safetensors {size} bytes, header describes {size + 10}",
        "rng_state_1.pth unreadable (File is not a zip file)"]
    assert last_complete_checkpoint(tmp_path) == str(good)
    only_model = checkpoint(20, optimizer=False)  # --save_only_model
    assert checkpoint_problems(only_model, optimizer_expected=False) == []
    assert "optimizer.pt missing" in checkpoint_problems(only_model)
    assert last_complete_checkpoint(tmp_path, optimizer_expected=False) == str(only_model)


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Nothing lost: checkpoint rotation.
# Strategies and helpers: tests/strategies.py.


@bounded(FAST)
@given(steps=st.lists(st.tuples(st.integers(1, 60), st.booleans()), min_size=1, max_size=8,
                      unique_by=lambda s: s[0]), limit=st.integers(1, 4))
def test_checkpoint_rotation_never_deletes_a_checkpoint_the_run_did_not_write(steps, limit):
    """``--save_total_limit``: of the ``checkpoint-N`` folders, those not this run's all stay; of the run's own,
    the newest ``limit`` stay (and the newest always)."""
    from multiview_plugin.training.checkpoints import rotate_own_checkpoints

    with workdir() as tmp:
        for step, _ in steps:
            (tmp / f"checkpoint-{step}").mkdir()
            (tmp / f"checkpoint-{step}" / "x").write_text(str(step))
        own = {step for step, mine in steps if mine}
        rotate_own_checkpoints(tmp, limit, lambda p: int(p.name.split("-")[1]) in own)
        left = {int(p.name.split("-")[1]) for p in tmp.iterdir()}
        assert {s for s, mine in steps if not mine} <= left
        assert left & own == set(sorted(own)[-limit:])


def test_checkpoints_in_the_way_lists_only_foreign_folders_the_run_would_write(tmp_path):
    from multiview_plugin.training.checkpoints import checkpoint_step, checkpoints_in_the_way

    for n in (1, 3, 5, 9):
        (tmp_path / f"checkpoint-{n}").mkdir()
    (tmp_path / "checkpoint-x").mkdir()
    mine = {tmp_path / "checkpoint-3"}
    found = checkpoints_in_the_way(tmp_path, after_step=1, until_step=5, is_this_runs=lambda p: p in mine)
    assert found == [tmp_path / "checkpoint-5"]  # 1: before the resumed step; 3: its own; 9: past max_steps
    assert checkpoints_in_the_way(tmp_path, 0, None, lambda p: False) == sorted(
        tmp_path / f"checkpoint-{n}" for n in (1, 3, 5, 9))
    assert checkpoint_step("a/checkpoint-12") == 12 and checkpoint_step("checkpoint-") is None
