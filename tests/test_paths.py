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
        assert "taking over a stale lock (pid 999999999 is not running)" in caplog.text
    lock.path.write_text("someone's file\n")
    os.utime(lock.path, (0, 0))  # old: not a lock being created
    with pytest.raises(ConfigError, match="is not a multiview_plugin lock"):
        OutputLock(out).acquire()
    assert lock.path.read_text() == "someone's file\n"


_HOLDER = """
import sys, time
from multiview_plugin.paths import OutputLock
lock = OutputLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_output_lock_is_an_os_lock_a_killed_holder_does_not_block(tmp_path, caplog):
    """The lock is filelock's OS lock: a second writer is refused at once (no wait) while another process holds
    it, even when the recorded pid is a live process's; after ``kill -9`` of the holder the kernel has released
    it and the next writer takes it over (the old pid marker trusted the pid alone: a reused pid blocked
    forever)."""
    import subprocess
    import sys
    import time

    out = tmp_path / "x.pkl"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(WriterBusyError, match=f"another writer \\(pid {holder.pid}\\) holds it") as err:
            OutputLock(out).acquire()
        assert time.monotonic() - started < 2 and "\n" not in str(err.value)
        assert OutputLock(out).path.read_text() == f"{LOCK_MARKER} {holder.pid}\n"  # the refusal changed nothing
    finally:
        holder.kill()
        holder.wait()
    caplog.set_level("WARNING", logger="multiview_plugin")
    with OutputLock(out) as lock:
        assert lock.path.read_text() == f"{LOCK_MARKER} {os.getpid()}\n"
        assert f"taking over a stale lock (pid {holder.pid} is not running)" in caplog.text
    assert not lock.path.exists()
    # a marker naming a live pid (here this test's parent) but no OS lock held: taken over, not a hang
    lock.path.write_text(f"{LOCK_MARKER} {os.getppid()}\n")
    with OutputLock(out):
        assert lock.path.read_text() == f"{LOCK_MARKER} {os.getpid()}\n"
    assert not lock.path.exists()


def test_output_lock_leaves_a_file_it_refuses_untouched_and_removes_only_its_own(tmp_path):
    """A refused acquire writes nothing; release removes the lock file only while it holds this run's line."""
    out = tmp_path / "x.pkl"
    with OutputLock(out) as lock:
        lock.path.write_text("replaced by hand\n")  # no longer our line: left in place
    assert lock.path.read_text() == "replaced by hand\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.pkl.lock"]


_RACER = """
import sys, time
from multiview_plugin.paths import OutputLock, WriterBusyError
while time.time() < float(sys.argv[2]):
    pass
try:
    with OutputLock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(2)
except WriterBusyError:
    print("busy", flush=True)
"""


def test_output_lock_writers_started_at_once_one_wins_nothing_left(tmp_path):
    """Writers started at the same moment on a fresh output: exactly one holds it, the others are refused as busy
    (not "not a multiview_plugin lock"), and no lock file is left behind."""
    import subprocess
    import sys
    import time

    out, start = tmp_path / "x.pkl", time.time() + 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(out), str(start)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    results = sorted(r.communicate(timeout=120)[0].strip() for r in racers)
    assert results == ["busy", "busy", "busy", "held"], results
    assert list(tmp_path.iterdir()) == []


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
