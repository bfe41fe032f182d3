"""Tests of multiview_plugin/training/run_settings.py: a rerun resumes only the same run on the same data
(the property-based round trips are at the end of this file)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from tests.strategies import DAMAGE, MEDIUM, bounded, damage, workdir


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


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Run-settings files (multiview_run.json) on resume.
# Strategies and helpers: tests/strategies.py.


@pytest.fixture(scope="module")
def run_settings_file(tmp_path_factory) -> dict:
    from multiview_plugin.training.run_settings import INPUTS_KEY, save_run_settings

    folder = tmp_path_factory.mktemp("props_run")
    settings = {"learning_rate": 1e-4, "model_name": "mvr", "seed": 7, "output_dir": str(folder),
                INPUTS_KEY: {"--dataset_path train.jsonl": "10 bytes, sha256 0123456789abcdef"}}
    save_run_settings(folder, settings)
    return {"folder": folder, "settings": settings, "bytes": (folder / "multiview_run.json").read_bytes()}


RUN_EDITS = {
    "settings_list": lambda r: r.__setitem__("settings", [["seed", 7]]),
    "settings_string": lambda r: r.__setitem__("settings", "seed=7"),
    "inputs_list": lambda r: r["settings"].__setitem__("input_files", ["train.jsonl"]),
    "inputs_number": lambda r: r["settings"]["input_files"].__setitem__("--dataset_path train.jsonl", 10),
    "data_changed": lambda r: r["settings"]["input_files"].__setitem__("--dataset_path train.jsonl", "11 bytes"),
    "option_changed": lambda r: r["settings"].__setitem__("seed", 8),
    "may_differ": lambda r: r["settings"].__setitem__("output_dir", "elsewhere"),
    "no_settings": lambda r: r.pop("settings"),
    "not_object": None,
}


@bounded(MEDIUM)
@given(kind=st.sampled_from(["none", "damage", *RUN_EDITS]), hit=DAMAGE)
def test_run_settings_files_resume_the_same_run_or_one_line(run_settings_file, kind, hit):
    """``multiview_run.json`` as the train driver reads it on resume: the same run resumes, anything else (other
    options or data, damage, wrong types) is one ConfigError line naming the file; never a traceback."""
    from multiview_plugin.errors import ConfigError
    from multiview_plugin.training.run_settings import check_resume

    with workdir() as tmp:
        path = tmp / "multiview_run.json"
        if kind == "damage":
            path.write_bytes(damage(run_settings_file["bytes"], *hit))
        else:
            record = json.loads(run_settings_file["bytes"])
            if kind != "none":
                edit = RUN_EDITS[kind]
                record = [record] if edit is None else record
                if edit is not None:
                    edit(record)
            path.write_text(json.dumps(record))
        try:
            check_resume(tmp, run_settings_file["settings"])
        except ConfigError as err:
            assert "\n" not in str(err) and str(tmp) in str(err), str(err)
            assert kind not in ("none", "may_differ"), str(err)
            if kind == "data_changed":
                assert "--dataset_path train.jsonl" in str(err) and "the data changed" in str(err)
            return
        assert kind in ("none", "may_differ", "damage"), kind
        if kind == "damage":  # still parses to the same run: only whitespace-level damage
            assert json.loads(path.read_text())["settings"] == run_settings_file["settings"]
