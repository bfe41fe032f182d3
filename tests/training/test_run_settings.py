"""Tests of multiview_plugin/training/run_settings.py: a rerun resumes only the same run on the same data
(the property-based round trips are in tests/reliability/test_properties.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.training.run_settings import (
    INPUTS_KEY,
    RUN_SETTINGS_FILE,
    check_resume,
    first_difference,
    input_fingerprints,
    load_run_settings,
    previous_run_files,
    run_settings,
    save_run_settings,
)


@dataclasses.dataclass
class _Args:
    learning_rate: float = 1e-5
    output_dir: str = "out"


def test_settings_round_trip_and_differences_ignore_what_may_change(tmp_path):
    settings = run_settings(_Args(), {"seed": 7})
    assert settings == {"learning_rate": 1e-5, "output_dir": "out", "seed": 7}
    save_run_settings(tmp_path, settings)
    assert load_run_settings(tmp_path) == settings
    assert json.loads((tmp_path / RUN_SETTINGS_FILE).read_text())["version"] == 1
    assert first_difference(settings, {**settings, "output_dir": "elsewhere", "max_steps": 9}) is None
    assert first_difference(settings, {**settings, "seed": 8, "learning_rate": 1.0}) == ("learning_rate", 1e-5, 1.0)
    assert first_difference({"a": 1}, {}) == ("a", 1, "<unset>")
    assert load_run_settings(tmp_path / "absent") is None


def test_input_fingerprints_hash_whole_files_and_skip_names(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_bytes(b"abc\n")
    prints = input_fingerprints({"--dataset_path": f"{data},Tevatron/msmarco", "--corpus_path": None})
    digest = hashlib.sha256(b"abc\n").hexdigest()[:16]
    assert prints == {f"--dataset_path {data}": f"4 bytes, sha256 {digest}"}


def test_check_resume_names_the_first_changed_option_or_file(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("one\n")
    settings = {"seed": 7, INPUTS_KEY: input_fingerprints({"--dataset_path": str(data)})}
    save_run_settings(tmp_path, settings)
    check_resume(tmp_path, dict(settings))
    with pytest.raises(ConfigError, match="was trained with --seed 7, this run has 8: resuming would mix two runs"):
        check_resume(tmp_path, {**settings, "seed": 8})
    data.write_text("two\n")
    with pytest.raises(ConfigError, match=f"on --dataset_path {data} as it was then .* the data changed"):
        check_resume(tmp_path, {**settings, INPUTS_KEY: input_fingerprints({"--dataset_path": str(data)})})


def test_unreadable_settings_are_one_line(tmp_path):
    (tmp_path / RUN_SETTINGS_FILE).write_text('{"settings": [1]}')
    with pytest.raises(ConfigError, match="field 'settings': expected an object"):
        load_run_settings(tmp_path)
    (tmp_path / RUN_SETTINGS_FILE).write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable run settings") as err:
        load_run_settings(tmp_path)
    assert "\n" not in str(err.value)
    assert previous_run_files(tmp_path) == [RUN_SETTINGS_FILE]
