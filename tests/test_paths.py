"""Tests of multiview_plugin/paths.py: outputs that cannot destroy inputs, folders replaced only when ours, one
writer per output."""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.paths import (
    LOCK_MARKER,
    OutputLock,
    WriterBusyError,
    check_output_folder,
    refuse_output_over_input,
    same_path,
    swap_in_folder,
)
from tests.strategies import FAST, bounded, workdir


def test_same_path_sees_through_symlinks_and_hard_links(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("x")
    (tmp_path / "sym").symlink_to(a)
    os.link(a, tmp_path / "hard")
    assert same_path(a, tmp_path / "sym") and same_path(a, tmp_path / "hard")
    assert same_path(a, tmp_path / "." / "a.txt")
    (tmp_path / "b.txt").write_text("x")
    assert not same_path(a, tmp_path / "b.txt") and not same_path(a, tmp_path / "missing")


def test_an_output_over_an_input_is_refused_in_one_line(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("{}\n")
    with pytest.raises(ConfigError) as err:
        refuse_output_over_input({"--output": corpus}, {"--corpus": None, "--dataset_path": [tmp_path / "x", corpus]})
    assert str(err.value) == (f"--output {corpus} is the same file as --dataset_path {corpus}: writing it would "
                              "destroy the input; choose another output path")
    with pytest.raises(ConfigError, match=f"--index_dir {tmp_path} holds the input --corpus {corpus}"):
        refuse_output_over_input({"--index_dir": tmp_path}, {"--corpus": corpus}, folder_outputs=["--index_dir"])
    refuse_output_over_input({"--output": tmp_path / "run.txt", "--unset": None}, {"--corpus": corpus})


def test_check_output_folder_replaces_only_our_folders_on_request(tmp_path):
    check_output_folder(tmp_path / "absent", is_ours=False, overwrite=False, what="index")
    folder = tmp_path / "idx"
    folder.mkdir()
    check_output_folder(folder, is_ours=False, overwrite=False, what="index")  # empty
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not empty and is not a index .*holds notes.txt"):
        check_output_folder(folder, is_ours=False, overwrite=True, what="index")
    with pytest.raises(ConfigError, match="already holds a index; pass --overwrite to replace it"):
        check_output_folder(folder, is_ours=True, overwrite=False, what="index")
    with pytest.raises(ConfigError, match="and also notes.txt, which it did not write"):
        check_output_folder(folder, is_ours=True, overwrite=True, what="index", own_files=["index", "docid"])
    check_output_folder(folder, is_ours=True, overwrite=True, what="index", own_files=["notes.txt"])
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        check_output_folder(folder / "notes.txt", is_ours=True, overwrite=True, what="index")


def test_swap_in_folder_replaces_the_old_folder_whole(tmp_path):
    new, target = tmp_path / "new", tmp_path / "target"
    new.mkdir()
    (new / "f").write_text("new")
    target.mkdir()
    (target / "f").write_text("old")
    (target / "g").write_text("old only")
    swap_in_folder(new, target)
    assert sorted(p.name for p in target.iterdir()) == ["f"] and (target / "f").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]  # nothing left aside


def test_output_lock_refuses_a_second_writer_and_takes_over_a_stale_lock(tmp_path, caplog):
    out = tmp_path / "run.txt"
    with OutputLock(out) as lock:
        assert lock.path.read_text() == f"{LOCK_MARKER} {os.getpid()}\n"
        with pytest.raises(WriterBusyError, match=f"another writer \\(pid {os.getpid()}\\) holds it"):
            OutputLock(out).acquire()
    assert not lock.path.exists()
    lock.path.write_text(f"{LOCK_MARKER} 999999999\n")  # a killed writer's
    caplog.set_level("WARNING", logger="multiview_plugin")
    with OutputLock(out):
        assert "removing a stale lock (pid 999999999 is not running)" in caplog.text
    lock.path.write_text("someone's file\n")
    os.utime(lock.path, (0, 0))  # old: not a lock being created
    with pytest.raises(ConfigError, match="is not a multiview_plugin lock"):
        OutputLock(out).acquire()
    assert lock.path.read_text() == "someone's file\n"


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Nothing lost: the lock's own name.
# Strategies and helpers: tests/strategies.py.


@bounded(FAST)
@given(content=st.binary(max_size=64))
def test_output_lock_never_removes_a_file_without_its_marker(content):
    """Any bytes at ``<output>.lock`` but the tool's own marker line: never removed (one line), whatever pid
    they hold."""
    import os

    from multiview_plugin.paths import LOCK_MARKER, OutputLock

    assume(not content.startswith(LOCK_MARKER.encode()))
    with workdir() as tmp:
        lock = tmp / "x.pkl.lock"
        lock.write_bytes(content)
        os.utime(lock, (1, 1))
        with pytest.raises(MultiViewError) as err:
            OutputLock(tmp / "x.pkl").acquire()
        assert "\n" not in str(err.value) and lock.read_bytes() == content
