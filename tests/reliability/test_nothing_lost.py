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
from multiview_plugin.index.folder import META_FILE
from multiview_plugin.paths import OutputLock, WriterBusyError, refuse_output_over_input, same_path
from multiview_plugin.search import build_index

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


BACKENDS = ["faiss", pytest.param("qdrant", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("qdrant_client") is None, reason="qdrant-client not installed"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("extra", [[], ["--overwrite"]])
def test_index_every_backend_refuses_a_foreign_pyserini_index(tmp_path, capsys, backend, extra):
    """main: --backend qdrant wrote its docid over a Pyserini index's (index, docid, no multiview.json) and,
    with --overwrite, deleted its index file; the Faiss backend refused. One rule for every backend."""
    shard = write_shard(tmp_path / "corpus.0.pkl")
    theirs = tmp_path / "pyserini-index"
    theirs.mkdir()
    (theirs / "index").write_bytes(os.urandom(512))
    (theirs / "docid").write_text("their0\ntheir1\n")
    before = digests(theirs, ["index", "docid"])
    try:
        assert index_main(["--passage_reps", str(shard), "--index_dir", str(theirs), "--backend", backend,
                           "--target_recall", "0", *extra]) == 2
    finally:
        if backend == "qdrant":
            from multiview_plugin.search._qdrant import close_embedded

            close_embedded()
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not a multiview index" in err, err
    assert_untouched(theirs, before)
    assert sorted(p.name for p in theirs.iterdir()) == ["docid", "index"]


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
    # a pid that cannot run: a killed writer's lock
    (tmp_path / "x.pkl.lock").write_text("multiview_plugin output lock, pid 999999999\n")
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


def test_train_resume_refuses_edited_training_data_naming_the_file(finished_run, train_file, capsys):
    """main: only options were compared, so a rerun after the training file was edited resumed its checkpoint
    and exited 0, mixing two datasets in one run."""
    from multiview_plugin.driver.train import main as train_main

    out, argv = finished_run
    capsys.readouterr()
    model = (out / "model.safetensors").read_bytes()
    lines = train_file.read_text().splitlines()
    train_file.write_text("\n".join(lines[::-1]) + "\n")  # the same size, other order: still other data
    assert train_main([*argv, "--max_steps", "3"]) == 2
    err = _one_line_error(capsys)
    assert f"--dataset_path {train_file}" in err and "the data changed" in err and "--overwrite_output_dir" in err
    assert (out / "model.safetensors").read_bytes() == model and not (out / "checkpoint-3").exists()
    train_file.write_text("\n".join(lines) + "\n")  # restored: resumes
    assert train_main([*argv, "--max_steps", "3"]) == 0


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


def test_train_rotation_deletes_only_this_runs_checkpoints(tiny_bert, train_file, tmp_path):
    """main: --save_total_limit deleted a checkpoint-K folder the run did not write (warned as "incomplete")."""
    from multiview_plugin.driver.train import main as train_main

    out = tmp_path / "run"
    theirs = out / "checkpoint-100"
    before = unrelated(theirs)
    argv = ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "1",
            *TRAIN_COMMON]
    assert train_main(argv) == 0
    assert_untouched(theirs, before)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-100",
                                                                                          "checkpoint-3"]
    # resumed and extended: the interrupted run's own checkpoints count (and rotate), the foreign one does not
    assert train_main([*argv, "--max_steps", "5"]) == 0
    assert_untouched(theirs, before)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-100",
                                                                                          "checkpoint-5"]


def test_train_never_saves_into_a_checkpoint_folder_it_did_not_write(tiny_bert, train_file, tmp_path, capsys):
    """main: D/checkpoint-1/ holding a user's file: the run saved its step-1 checkpoint into it, counted it as its
    own, and --save_total_limit 1 deleted the folder with the user's file."""
    from multiview_plugin.driver.train import main as train_main

    out = tmp_path / "run"
    theirs = out / "checkpoint-1"
    before = unrelated(theirs)
    argv = ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "1",
            *TRAIN_COMMON]
    capsys.readouterr()
    assert train_main(argv) == 2
    err = _one_line_error(capsys)
    assert "checkpoint-1" in err and "not written by this run" in err
    assert_untouched(theirs, before)
    assert sorted(p.name for p in theirs.iterdir()) == ["data.bin", "notes.txt", "sub"]
    # with --overwrite_output_dir too: overwriting is for what the train driver wrote, not a user's folder
    assert train_main([*argv, "--overwrite_output_dir"]) == 2
    assert "not written by this run" in _one_line_error(capsys)
    assert_untouched(theirs, before)


def test_trainer_refuses_to_save_into_a_foreign_checkpoint_folder(tiny_bert, train_file, tmp_path, capsys):
    """The trainer's own guard (a folder appearing after the start check): the save stops with one line."""
    from multiview_plugin.driver.train import main as train_main
    from multiview_plugin.training import checkpoints

    out = tmp_path / "run"
    theirs = out / "checkpoint-2"
    argv = ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "1",
            *TRAIN_COMMON]
    real = checkpoints.checkpoints_in_the_way

    def appears_later(*args, **kwargs):
        found = real(*args, **kwargs)
        before.update(unrelated(theirs))  # created after the start check, before step 2 is saved
        return found

    before: dict[str, str] = {}
    import unittest.mock

    with unittest.mock.patch.object(checkpoints, "checkpoints_in_the_way", appears_later):
        capsys.readouterr()
        assert train_main(argv) == 2
    err = capsys.readouterr().err  # after progress bars: the trainer had started
    assert "Traceback" not in err
    assert err.count("error: ") == 1 and (
        f"error: {theirs} exists and was not written by this run: refusing to save a checkpoint into it (move it "
        "away, or choose another --output_dir)\n") in err
    assert_untouched(theirs, before)


def test_train_output_dir_equal_to_an_input_is_refused(tiny_bert, train_file, tmp_path, capsys):
    from multiview_plugin.driver.train import main as train_main

    digest = hashlib.sha256(train_file.read_bytes()).hexdigest()
    assert train_main(["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir",
                       str(train_file), "--max_steps", "1", *TRAIN_COMMON]) == 2
    assert "same file as --dataset_path" in _one_line_error(capsys)
    assert hashlib.sha256(train_file.read_bytes()).hexdigest() == digest


# --------------------------------------------------------------------------- every driver's outputs


@pytest.fixture(scope="module")
def inputs(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """A tiny mvr model and what the drivers read: corpus, queries, qrels, train file, shards, index, run."""
    import torch

    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.driver.encode import main as encode_main
    from multiview_plugin.driver.search import main as search_main
    from multiview_plugin.registry import get_encoder_class
    from tests.conftest import TOPICS, write_topics_corpus, write_train_file

    root = tmp_path_factory.mktemp("nothing_lost")
    torch.manual_seed(0)
    get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=2),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16)).save(root / "mvr")
    files = {"model": root / "mvr", "corpus": write_topics_corpus(root / "corpus.jsonl"),
             "queries": root / "queries.tsv", "qrels": root / "qrels.txt",
             "train": write_train_file(root / "train.jsonl", 1),
             "shard": root / "c.pkl", "qshard": root / "q.pkl", "index": root / "idx", "run": root / "run.trec"}
    files["queries"].write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    files["qrels"].write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(len(TOPICS))))
    common = ["--model_name_or_path", str(files["model"]), "--per_device_eval_batch_size", "4"]
    assert encode_main([*common, "--dataset_path", str(files["corpus"]), "--encode_output_path",
                        str(files["shard"])]) == 0
    assert encode_main([*common, "--dataset_path", str(files["queries"]), "--encode_is_query",
                        "--encode_output_path", str(files["qshard"])]) == 0
    assert index_main(["--passage_reps", str(files["shard"]), "--index_dir", str(files["index"])]) == 0
    assert search_main(["--index", str(files["index"]), "--encoded_queries", str(files["qshard"]), "--output",
                        str(files["run"]), "--hits", "5"]) == 0
    return files


def _error_line(capsys) -> str:
    """The one ``error:`` line of a driver's stderr (progress bars of model loading may come before it)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line[line.index("error: "):] for line in err.splitlines() if "error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def refused_over_input(main, argv: list[str], victim: Path, capsys, needle: str = "same file as") -> None:
    """``main(argv)`` exits 2 with one line (``needle`` in it) and leaves ``victim``, an input, byte-identical."""
    digest = hashlib.sha256(victim.read_bytes()).hexdigest()
    capsys.readouterr()
    assert main(argv) == 2
    assert needle in _error_line(capsys)
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == digest


def test_encode_output_beside_unrelated_files_and_over_its_input(inputs, tmp_path, capsys):
    from multiview_plugin.driver.encode import main as encode_main

    out = tmp_path / "out"
    before = unrelated(out)
    common = ["--model_name_or_path", str(inputs["model"]), "--dataset_path", str(inputs["corpus"])]
    assert encode_main([*common, "--encode_output_path", str(out / "c.pkl")]) == 0
    assert_untouched(out, before)
    assert sorted(p.name for p in out.iterdir()) == ["c.pkl", "c.pkl.json", "data.bin", "notes.txt", "sub"]
    refused_over_input(encode_main, [*common, "--encode_output_path", str(inputs["corpus"])], inputs["corpus"], capsys)
    link = tmp_path / "link.jsonl"
    link.symlink_to(inputs["corpus"])
    refused_over_input(encode_main, [*common, "--encode_output_path", str(link), "--overwrite"], inputs["corpus"],
                       capsys)


def test_encode_refuses_to_replace_a_file_it_did_not_write(inputs, tmp_path, capsys):
    """main: an existing file at --encode_output_path without our sidecar was replaced by the new shard (exit 0)."""
    from multiview_plugin.driver.encode import main as encode_main
    from multiview_plugin.encoding.shards import read_shard

    out = tmp_path / "out"
    before = unrelated(out)
    common = ["--model_name_or_path", str(inputs["model"]), "--dataset_path", str(inputs["corpus"])]
    tevatron = out / "tevatron.pkl"  # a plain Tevatron pickle (no sidecar) is not ours either
    tevatron.write_bytes(inputs["shard"].read_bytes())
    for victim in (out / "data.bin", tevatron):
        digest = hashlib.sha256(victim.read_bytes()).hexdigest()
        assert encode_main([*common, "--encode_output_path", str(victim)]) == 2
        err = _error_line(capsys)
        assert str(victim) in err and "not written by encode" in err and "--overwrite" in err
        assert hashlib.sha256(victim.read_bytes()).hexdigest() == digest
        assert not Path(f"{victim}.json").exists() and not Path(f"{victim}.lock").exists()
    assert encode_main([*common, "--encode_output_path", str(out / "sub")]) == 2  # a folder: never
    assert "not a file" in _error_line(capsys)
    assert_untouched(out, before)
    # --overwrite says to replace it; our own shard is skipped on rerun as before
    assert encode_main([*common, "--encode_output_path", str(tevatron), "--overwrite"]) == 0
    assert read_shard(tevatron)[2] is not None
    assert encode_main([*common, "--encode_output_path", str(tevatron)]) == 0


@pytest.mark.parametrize("content", [b"999999999\n", b"my lock notes\n", b"", b"\xff\xfe binary"])
def test_output_lock_never_removes_a_file_without_its_marker(tmp_path, content):
    """main: a user's file at <output>.lock (any content whose pid is not running) was removed as a stale lock."""
    lock = tmp_path / "x.pkl.lock"
    lock.write_bytes(content)
    os.utime(lock, (1, 1))  # old: not a writer mid-creation
    with pytest.raises(MultiViewError, match="is not a multiview_plugin lock") as err:
        OutputLock(tmp_path / "x.pkl").acquire()
    assert "\n" not in str(err.value)
    assert lock.read_bytes() == content


@pytest.mark.parametrize("sidecar", ['{"my": "settings"}\n', "[1, 2]\n", "not json\n", "\udcff"])
@pytest.mark.parametrize("extra", [[], ["--overwrite"]])
def test_encode_never_replaces_a_users_file_at_the_sidecar_path(inputs, tmp_path, capsys, sidecar, extra):
    """main: encode wrote its sidecar over a user's <output>.json (and --overwrite deleted it first)."""
    from multiview_plugin.driver.encode import main as encode_main

    out = tmp_path / "out"
    out.mkdir()
    theirs = out / "c.pkl.json"
    theirs.write_bytes(sidecar.encode("utf-8", "surrogateescape"))
    before = theirs.read_bytes()
    assert encode_main(["--model_name_or_path", str(inputs["model"]), "--dataset_path", str(inputs["corpus"]),
                        "--encode_output_path", str(out / "c.pkl"), *extra]) == 2
    err = _error_line(capsys)
    assert "not a shard sidecar" in err and str(theirs) in err
    assert theirs.read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["c.pkl.json"]


def test_encode_resumes_its_own_shard_killed_before_the_sidecar(inputs, tmp_path, monkeypatch):
    """The final pickle is in place but the sidecar is not (killed in between): the shard is still ours (its resume
    state is beside it), so the rerun finishes it instead of refusing it as a foreign file."""
    from multiview_plugin.driver.encode import main as encode_main
    from multiview_plugin.encoding import shards

    out = tmp_path / "c.pkl"
    argv = ["--model_name_or_path", str(inputs["model"]), "--dataset_path", str(inputs["corpus"]),
            "--encode_output_path", str(out), "--per_device_eval_batch_size", "4"]  # as the reference shard
    write = shards._atomic_write_text

    def killed_at_the_sidecar(path, text):
        if path == shards.sidecar_path(out):
            raise KeyboardInterrupt
        write(path, text)

    with monkeypatch.context() as m:
        m.setattr(shards, "_atomic_write_text", killed_at_the_sidecar)
        with pytest.raises(KeyboardInterrupt):
            encode_main(argv)
    assert out.is_file() and not shards.sidecar_path(out).exists()
    assert encode_main(argv) == 0
    assert shards.read_shard(out)[1] == shards.read_shard(inputs["shard"])[1]
    assert shards.read_shard(out)[0].tobytes() == shards.read_shard(inputs["shard"])[0].tobytes()


def test_search_outputs_beside_unrelated_files_and_over_its_inputs(inputs, tmp_path, capsys):
    from multiview_plugin.driver.search import main as search_main

    out = tmp_path / "out"
    before = unrelated(out)
    pyserini = ["--index", str(inputs["index"]), "--topics", str(inputs["queries"]), "--encoder", str(inputs["model"])]
    assert search_main([*pyserini, "--output", str(out / "run.trec"), "--explain", str(out / "explain.jsonl")]) == 0
    tevatron = ["--query_reps", str(inputs["qshard"]), "--passage_reps", str(inputs["shard"])]
    assert search_main([*tevatron, "--save_ranking_to", str(out / "run.txt"), "--save_text"]) == 0
    assert_untouched(out, before)
    assert {"run.trec", "explain.jsonl", "run.txt"} <= {p.name for p in out.iterdir()}
    refused_over_input(search_main, [*pyserini, "--output", str(inputs["queries"])], inputs["queries"], capsys)
    refused_over_input(search_main, [*pyserini, "--output", str(tmp_path / "r.trec"), "--explain",
                                     str(inputs["index"] / "docid")], inputs["index"] / "docid", capsys)
    refused_over_input(search_main, [*tevatron, "--save_ranking_to", str(inputs["qshard"])], inputs["qshard"], capsys)


def test_evaluate_output_beside_unrelated_files_and_over_its_inputs(inputs, tmp_path, capsys):
    from multiview_plugin.driver.evaluate import main as evaluate_main

    out = tmp_path / "out"
    before = unrelated(out)
    common = ["--run", str(inputs["run"]), "--qrels", str(inputs["qrels"]), "--metrics", "MRR@10"]
    assert evaluate_main([*common, "--output_json", str(out / "metrics.json")]) == 0
    assert_untouched(out, before)
    assert "MRR@10" in json.loads((out / "metrics.json").read_text())
    refused_over_input(evaluate_main, [*common, "--output_json", str(inputs["run"])], inputs["run"], capsys)
    refused_over_input(evaluate_main, [*common, "--output_json", str(inputs["qrels"])], inputs["qrels"], capsys)


def test_analyze_outputs_beside_unrelated_files_and_over_its_inputs(inputs, tmp_path, capsys):
    from multiview_plugin.driver.analyze import main as analyze_main

    out = tmp_path / "out"
    before = unrelated(out)
    argv = ["--index", str(inputs["index"]), "--topics", str(inputs["queries"]), "--encoder", str(inputs["model"])]
    assert analyze_main([*argv, "--qrels", str(inputs["qrels"]), "--output_dir", str(out)]) == 0
    assert_untouched(out, before)
    assert {"analysis.json", "view_usage.png"} <= {p.name for p in out.iterdir()}
    # a qrels file that is the analysis.json the output folder would get
    folder = tmp_path / "shared"
    folder.mkdir()
    qrels = folder / "analysis.json"
    qrels.write_bytes(inputs["qrels"].read_bytes())
    refused_over_input(analyze_main, [*argv, "--qrels", str(qrels), "--output_dir", str(folder)], qrels, capsys)


def test_mine_negatives_output_beside_unrelated_files_and_over_its_inputs(inputs, tmp_path, capsys):
    from multiview_plugin.driver.mine_negatives import main as mine_main

    out = tmp_path / "out"
    before = unrelated(out)
    argv = ["--model_name_or_path", str(inputs["model"]), "--index", str(inputs["index"]), "--dataset_path",
            str(inputs["train"]), "--corpus_path", str(inputs["corpus"]), "--num_negatives", "2", "--depth", "4"]
    assert mine_main([*argv, "--output", str(out / "mined.jsonl")]) == 0
    assert_untouched(out, before)
    assert (out / "mined.jsonl").read_text().count("\n") == inputs["train"].read_text().count("\n")
    refused_over_input(mine_main, [*argv, "--output", str(inputs["train"])], inputs["train"], capsys)
    refused_over_input(mine_main, [*argv, "--output", str(inputs["corpus"])], inputs["corpus"], capsys)


@pytest.fixture(scope="module")
def doc2query(tmp_path_factory) -> Path:
    from tests.conftest import make_tiny_t5

    return make_tiny_t5(tmp_path_factory.mktemp("doc2query"), seq2seq=True)


def _generate(model: Path, corpus: Path, output: Path, *extra: str) -> int:
    from multiview_plugin.driver.generate_queries import main as generate_main

    return generate_main(["--model_name_or_path", str(model), "--corpus_path", str(corpus), "--output", str(output),
                          "--num_queries", "2", "--max_query_length", "4", "--batch_size", "4", *extra])


def test_generate_queries_output_beside_unrelated_files_and_over_its_input(inputs, doc2query, tmp_path, capsys):
    from multiview_plugin.driver.generate_queries import main as generate_main

    out = tmp_path / "out"
    before = unrelated(out)
    assert _generate(doc2query, inputs["corpus"], out / "pq.jsonl") == 0
    assert_untouched(out, before)
    assert sorted(p.name for p in out.iterdir()) == ["data.bin", "notes.txt", "pq.jsonl", "pq.jsonl.json", "sub"]
    refused_over_input(generate_main, ["--model_name_or_path", str(doc2query), "--corpus_path",
                                       str(inputs["corpus"]), "--output", str(inputs["corpus"])], inputs["corpus"],
                       capsys)


def test_generate_queries_replaces_or_resumes_only_its_own_output(inputs, doc2query, tmp_path, capsys):
    """main: any existing --output was taken as a complete shard of its own (exit 0, nothing generated), and any
    <output>.partial was resumed and renamed over --output."""
    out = tmp_path / "out"
    before = unrelated(out)
    assert _generate(doc2query, inputs["corpus"], out / "notes.txt") == 2  # a user's file
    err = _error_line(capsys)
    assert str(out / "notes.txt") in err and "not written by generate_queries" in err
    (out / "pq.jsonl.partial").write_text('{"docid": "d0", "queries": ["mine"]}\n')  # a .partial of someone else
    assert _generate(doc2query, inputs["corpus"], out / "pq.jsonl") == 2
    assert "pq.jsonl.partial" in _error_line(capsys)
    assert (out / "pq.jsonl.partial").read_text() == '{"docid": "d0", "queries": ["mine"]}\n'
    assert not (out / "pq.jsonl").exists()
    (out / "pq.jsonl.json").write_text('{"settings": 1}\n')  # a marker it did not write
    assert _generate(doc2query, inputs["corpus"], out / "x.jsonl") == 0
    assert _generate(doc2query, inputs["corpus"], out / "pq.jsonl", "--overwrite") == 2
    assert "pq.jsonl.json exists and was not written by generate_queries" in _error_line(capsys)
    assert_untouched(out, before)
    # its own output: skipped when complete with the same settings, refused with others unless --overwrite
    mine = out / "x.jsonl"
    text = mine.read_text()
    assert _generate(doc2query, inputs["corpus"], mine) == 0 and mine.read_text() == text
    assert _generate(doc2query, inputs["corpus"], mine, "--seed", "7") == 2
    assert "seed (was 42, now 7)" in _error_line(capsys)
    assert _generate(doc2query, inputs["corpus"], mine, "--seed", "7", "--overwrite") == 0
    assert mine.read_text() != text
    # edited after it was written: no longer what it wrote, never replaced
    mine.write_text(mine.read_text() + '{"docid": "extra", "queries": ["q"]}\n')
    edited = mine.read_text()
    for extra in ([], ["--overwrite"]):
        assert _generate(doc2query, inputs["corpus"], mine, *extra) == 2
        assert "has changed since generate_queries wrote it" in _error_line(capsys)
    assert mine.read_text() == edited


def test_generate_queries_resumes_only_the_partial_its_marker_describes(inputs, doc2query, tmp_path, capsys,
                                                                         monkeypatch):
    """main: a marker copied beside someone's .partial made generate_queries resume (append to) their file and
    rename it over --output; a marker whose settings is not an object was a traceback."""
    from multiview_plugin.encoding import doc2query as generation

    out = tmp_path / "out"
    out.mkdir()
    calls = []

    def killed_in_second_batch(f, text):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        f.write(text)

    with monkeypatch.context() as m:
        m.setattr(generation, "_append", killed_in_second_batch)
        with pytest.raises(KeyboardInterrupt):
            _generate(doc2query, inputs["corpus"], out / "ours.jsonl")
    ours = (out / "ours.jsonl.partial").read_bytes()
    theirs = out / "theirs.jsonl.partial"
    for content in (b'{"docid": "d0", "queries": ["mine"]}\n', ours[:-3] + b"xy\n", ours + b"more\n"):
        theirs.write_bytes(content)
        (out / "theirs.jsonl.json").write_bytes((out / "ours.jsonl.json").read_bytes())  # a copied marker
        for extra in ([], ["--overwrite"]):
            assert _generate(doc2query, inputs["corpus"], out / "theirs.jsonl", *extra) == 2
            err = _error_line(capsys)
            assert str(theirs) in err and "is not the partial output its marker" in err, err
            assert theirs.read_bytes() == content and not (out / "theirs.jsonl").exists()
    # its own partial, with the same marker: resumed
    assert _generate(doc2query, inputs["corpus"], out / "ours.jsonl") == 0
    assert (out / "ours.jsonl").read_bytes().startswith(ours) and not (out / "ours.jsonl.partial").exists()
    # a marker of ours whose fields are not what it writes: one line naming the field
    marker = json.loads((out / "ours.jsonl.json").read_text())
    for field, value in (("settings", [1, 2]), ("settings", "x"), ("complete", "yes"), ("partial", 3),
                         ("partial", {"bytes": -1, "sha256": "", "pending": ""})):
        (out / "bad.jsonl.json").write_text(json.dumps({**marker, field: value}))
        assert _generate(doc2query, inputs["corpus"], out / "bad.jsonl") == 2
        err = _error_line(capsys)
        assert "bad.jsonl.json: field " in err and "expected" in err, err
