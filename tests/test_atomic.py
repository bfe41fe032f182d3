"""Tests of multiview_plugin/atomic.py: files appear complete or not at all."""

from __future__ import annotations

import errno
import json

import pytest

from multiview_plugin.atomic import atomic_open, with_path, write_jsonl, write_lines


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError, match="boom"), atomic_open(path) as f:
        f.write("half of the new")
        raise RuntimeError("boom")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_completed_write_replaces_the_file_and_creates_parents(tmp_path):
    path = tmp_path / "a" / "b" / "out.bin"
    with atomic_open(path, "wb", fsync=True) as f:
        f.write(b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.bin"]
    with pytest.raises(ValueError, match="mode 'w' or 'wb', not 'a'"), atomic_open(path, "a"):
        pass


def test_write_lines_and_jsonl_round_trip(tmp_path):
    assert write_lines(tmp_path / "l.txt", ["a", "b"]).read_text() == "a\nb\n"
    rows = [{"q": "café", "n": 1}, {"q": "x"}]
    text = write_jsonl(tmp_path / "r.jsonl", rows).read_text(encoding="utf-8")
    assert "café" in text  # non-ASCII kept as is
    assert [json.loads(line) for line in text.splitlines()] == rows


def test_with_path_names_the_file_of_an_anonymous_os_error(tmp_path):
    err = OSError(errno.ENOSPC, "No space left on device")
    named = with_path(err, tmp_path / "x")
    assert isinstance(named, OSError) and named.errno == errno.ENOSPC
    assert str(named) == f"[Errno {errno.ENOSPC}] No space left on device (writing {tmp_path / 'x'})"
    located = FileNotFoundError(errno.ENOENT, "No such file", "/some/file")
    assert with_path(located, tmp_path / "x") is located  # already names its file
    assert with_path(ValueError("v"), tmp_path).args == ("v",)
