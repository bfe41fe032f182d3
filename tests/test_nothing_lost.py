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
