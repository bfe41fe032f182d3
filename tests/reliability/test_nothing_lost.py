"""Outputs never destroy inputs: every driver's outputs, written into a folder of unrelated files, leave those
files byte-identical; an output equal to an input is refused; a folder we did not write is never replaced."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from multiview_plugin.driver.index import main as index_main
from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
from multiview_plugin.errors import MultiViewError
from multiview_plugin.paths import OutputLock, WriterBusyError, refuse_output_over_input, same_path
from multiview_plugin.search import build_index
from multiview_plugin.search._index import META_FILE

DIM = 8


def write_shard(path: Path, n_docs: int = 6, views: int = 2, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    info = ShardInfo(model_name="test", dim=0, views_per_doc=0, dtype="float32", num_items=0, num_vectors=0)
    w = ShardWriter(path, info, multi_vector=True)
    w.add([f"doc{i}" for i in range(n_docs)], rng.standard_normal((n_docs, views, DIM)).astype(np.float32),
          np.ones((n_docs, views), dtype=bool))
    w.close()
    return path


def unrelated(folder: Path) -> dict[str, str]:
    """Fill ``folder`` with a few files (and a subfolder) of a user's; returns their digests."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "data.bin").write_bytes(os.urandom(256))
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "keep.json").write_text('{"keep": true}\n')
    return digests(folder, ["notes.txt", "data.bin", "sub/keep.json"])


def digests(folder: Path, names) -> dict[str, str]:
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


def assert_untouched(folder: Path, before: dict[str, str]) -> None:
    assert digests(folder, before) == before


# --------------------------------------------------------------------------- index folders


def test_index_refuses_folder_holding_its_own_input_shards(tmp_path, capsys):
    """main: --index_dir pointed at the shards' folder deleted it (shards and all) and exited 0."""
    emb = tmp_path / "emb"
    emb.mkdir()
    shard = write_shard(emb / "corpus.0.pkl")
    before = unrelated(emb)
    shard_digest = hashlib.sha256(shard.read_bytes()).hexdigest()
    for extra in ([], ["--overwrite"]):
        assert index_main(["--passage_reps", str(emb / "*.pkl"), "--index_dir", str(emb), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "input" in err
    assert_untouched(emb, before)
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == shard_digest


def test_index_refuses_non_empty_folder_that_is_not_an_index(tmp_path, capsys):
    shard = write_shard(tmp_path / "corpus.0.pkl")
    project = tmp_path / "project"
    before = unrelated(project)
    for extra in ([], ["--overwrite"]):
        assert index_main(["--passage_reps", str(shard), "--index_dir", str(project), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a multiview index" in err and "refusing" in err
    assert_untouched(project, before)
    assert sorted(p.name for p in project.iterdir()) == ["data.bin", "notes.txt", "sub"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".project")]  # no temporary left behind


def test_index_builds_into_empty_or_new_folder(tmp_path):
    shard = write_shard(tmp_path / "corpus.0.pkl")
    (tmp_path / "empty").mkdir()
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(tmp_path / "empty")]) == 0
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(tmp_path / "new" / "idx")]) == 0
    assert (tmp_path / "empty" / META_FILE).is_file() and (tmp_path / "new" / "idx" / META_FILE).is_file()


def test_index_replaces_own_index_only_with_overwrite(tmp_path, capsys):
    shard = write_shard(tmp_path / "corpus.0.pkl")
    other = write_shard(tmp_path / "other.0.pkl", n_docs=4, seed=1)
    idx = tmp_path / "idx"
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(idx)]) == 0
    assert index_main(["--passage_reps", str(other), "--index_dir", str(idx)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert json.loads((idx / META_FILE).read_text())["num_docs"] == 6
    assert index_main(["--passage_reps", str(other), "--index_dir", str(idx), "--overwrite"]) == 0
    assert json.loads((idx / META_FILE).read_text())["num_docs"] == 4
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # old one removed


def test_index_overwrite_keeps_a_folder_holding_foreign_files(tmp_path, capsys):
    shard = write_shard(tmp_path / "corpus.0.pkl")
    idx = tmp_path / "idx"
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(idx)]) == 0
    (idx / "my_results.tsv").write_text("precious\n")
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(idx), "--overwrite"]) == 2
    assert "my_results.tsv" in capsys.readouterr().err
    assert (idx / "my_results.tsv").read_text() == "precious\n"


def test_index_old_index_kept_when_the_new_build_fails(tmp_path):
    shard = write_shard(tmp_path / "corpus.0.pkl")
    idx = tmp_path / "idx"
    build_index([shard], idx)
    before = digests(idx, [p.name for p in idx.iterdir()])
    with pytest.raises((RuntimeError, MultiViewError)):  # faiss's error, or a one-line one
        build_index([shard], idx, index_factory="NotAFactory", overwrite=True)
    assert digests(idx, before) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_index_refuses_a_file_as_index_dir(tmp_path, capsys):
    shard = write_shard(tmp_path / "corpus.0.pkl")
    target = tmp_path / "results.txt"
    target.write_text("keep\n")
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(target), "--overwrite"]) == 2
    assert target.read_text() == "keep\n"


# --------------------------------------------------------------------------- paths helper


def test_same_path_through_symlinks_and_hard_links(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("x")
    (tmp_path / "link.txt").symlink_to(a)
    os.link(a, tmp_path / "hard.txt")
    assert same_path(a, tmp_path / "link.txt")
    assert same_path(a, tmp_path / "hard.txt")
    assert same_path(a, tmp_path / "sub" / ".." / "a.txt") or not (tmp_path / "sub").exists()
    assert not same_path(a, tmp_path / "b.txt")
    with pytest.raises(Exception, match="same file as --topics"):
        refuse_output_over_input({"--output": tmp_path / "hard.txt"}, {"--topics": str(a)})


def test_output_lock_refuses_second_writer_and_takes_over_stale(tmp_path):
    out = tmp_path / "x.pkl"
    with OutputLock(out):
        with pytest.raises(WriterBusyError, match="another writer"):
            OutputLock(out).acquire()
    assert not (tmp_path / "x.pkl.lock").exists()
    (tmp_path / "x.pkl.lock").write_text("999999999\n")  # a pid that cannot run: a killed writer's lock
    with OutputLock(out):
        pass
    assert not (tmp_path / "x.pkl.lock").exists()


# --------------------------------------------------------------------------- train: resume only the same run

TRAIN_COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
                "--query_max_len", "16", "--passage_max_len", "32", "--seed", "7", "--dataloader_num_workers", "0",
                "--model_name", "mvr", "--mvr_num_views", "2", "--logging_steps", "1"]


@pytest.fixture
def finished_run(tiny_bert, train_file, tmp_path):
    from multiview_plugin.driver.train import main as train_main

    out = tmp_path / "run"
    argv = ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2", *TRAIN_COMMON]
    assert train_main(argv) == 0
    assert (out / "checkpoint-2" / "multiview_run.json").is_file() and (out / "multiview_run.json").is_file()
    return out, argv


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_train_rerun_with_other_settings_is_refused(finished_run, capsys):
    """main: the rerun resumed checkpoint-2, trained 0 steps and exited 0 (the saved model kept the old λ)."""
    from multiview_plugin.driver.train import main as train_main

    out, argv = finished_run
    capsys.readouterr()
    model = (out / "model.safetensors").read_bytes()
    assert train_main([*argv, "--learning_rate", "1e-3", "--mvr_lambda", "0.5"]) == 2
    err = _one_line_error(capsys)
    assert "--learning_rate" in err and "--overwrite_output_dir" in err
    assert train_main([*argv, "--mvr_lambda", "0.5"]) == 2
    assert "--mvr_lambda 0.01" in _one_line_error(capsys)
    assert (out / "model.safetensors").read_bytes() == model


def test_train_rerun_with_other_num_views_is_one_line_not_a_state_dict_traceback(finished_run, capsys):
    from multiview_plugin.driver.train import main as train_main

    out, argv = finished_run
    capsys.readouterr()
    assert train_main([*argv, "--mvr_num_views", "3"]) == 2
    assert "--mvr_num_views 2" in _one_line_error(capsys)
    # a checkpoint from before run settings were saved: its multiview_config.json is checked instead
    for folder in (out, out / "checkpoint-2"):
        (folder / "multiview_run.json").unlink()
    assert train_main([*argv, "--mvr_num_views", "3"]) == 2
    assert "--mvr_num_views 2" in _one_line_error(capsys)


def test_train_identical_rerun_resumes_and_longer_one_extends(finished_run, caplog):
    from multiview_plugin.driver.train import main as train_main

    out, argv = finished_run
    model = (out / "model.safetensors").read_bytes()
    caplog.set_level("INFO", logger="multiview_plugin")
    assert train_main([*argv, "--logging_steps", "2", "--save_total_limit", "3"]) == 0  # may differ
    assert "already holds this run, finished" in caplog.text
    assert (out / "model.safetensors").read_bytes() == model  # (main: one step past the end was trained)
    assert not (out / "checkpoint-3").exists()
    assert train_main([*argv, "--max_steps", "3"]) == 0
    assert f"resuming from {out / 'checkpoint-2'}" in caplog.text
    steps = [h["step"] for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    assert steps == [1, 2, 3]


def test_train_overwrite_output_dir_starts_afresh(finished_run):
    from multiview_plugin.driver.train import main as train_main

    out, argv = finished_run
    assert train_main([*argv, "--learning_rate", "1e-3", "--overwrite_output_dir"]) == 0
    settings = json.loads((out / "multiview_run.json").read_text())["settings"]
    assert settings["learning_rate"] == 1e-3


def test_train_refuses_a_finished_run_without_checkpoint(tiny_bert, train_file, tmp_path, capsys):
    from multiview_plugin.driver.train import main as train_main

    out = tmp_path / "run"
    argv = ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            "--max_steps", "1", "--save_strategy", "no", *TRAIN_COMMON]
    assert train_main(argv) == 0
    capsys.readouterr()
    model = (out / "model.safetensors").read_bytes()
    assert train_main([*argv, "--learning_rate", "1e-3"]) == 2
    assert "holds a previous run" in _one_line_error(capsys)
    assert (out / "model.safetensors").read_bytes() == model


def test_train_output_dir_equal_to_an_input_is_refused(tiny_bert, train_file, tmp_path, capsys):
    from multiview_plugin.driver.train import main as train_main

    digest = hashlib.sha256(train_file.read_bytes()).hexdigest()
    assert train_main(["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir",
                       str(train_file), "--max_steps", "1", *TRAIN_COMMON]) == 2
    assert "same file as --dataset_path" in _one_line_error(capsys)
    assert hashlib.sha256(train_file.read_bytes()).hexdigest() == digest
