"""Tests of multiview_plugin/index/folder.py: the rule every backend applies to ``--index_dir`` before writing in it,
the index folder's file list, and the one-writer lock around a build."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from multiview_plugin.errors import ConfigError, MultiViewError
from multiview_plugin.index.folder import INDEX_FOLDER_FILES, META_FILE, check_index_folder, index_files, one_writer
from multiview_plugin.paths import OutputLock


def test_an_absent_or_empty_folder_may_be_written(tmp_path):
    check_index_folder(tmp_path / "new", overwrite=False)
    (tmp_path / "empty").mkdir()
    check_index_folder(tmp_path / "empty", overwrite=False)


def test_a_folder_that_is_not_ours_is_never_written_into(tmp_path):
    """Someone's Pyserini index (``index``, ``docid``, no ``multiview.json``) is refused, with --overwrite too."""
    pyserini = tmp_path / "pyserini"
    pyserini.mkdir()
    for name in ("index", "docid"):
        (pyserini / name).write_text("x")
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match="is not empty and is not a multiview index"):
            check_index_folder(pyserini, overwrite=overwrite)


def test_our_folder_is_replaced_only_with_overwrite_and_only_when_it_holds_nothing_else(tmp_path):
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / META_FILE).write_text("{}")
    (ours / "index").write_text("x")
    with pytest.raises(ConfigError, match="already holds a multiview index"):
        check_index_folder(ours, overwrite=False)
    check_index_folder(ours, overwrite=True)
    (ours / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="notes.txt"):
        check_index_folder(ours, overwrite=True)
    check_index_folder(ours, overwrite=True, own_files=("notes.txt",))


def test_an_interrupted_build_of_a_resuming_backend_may_resume(tmp_path):
    folder = tmp_path / "resume"
    folder.mkdir()
    (folder / "storage").mkdir()
    check_index_folder(folder, overwrite=False, resumable=("storage",))
    (folder / "other").write_text("x")
    with pytest.raises(ConfigError):
        check_index_folder(folder, overwrite=False, resumable=("storage",))


def test_index_files_lists_what_a_build_writes():
    assert index_files(None) == []
    assert index_files("idx") == [os.path.join("idx", name) for name in INDEX_FOLDER_FILES]
    assert {"index", "docid", META_FILE} <= set(INDEX_FOLDER_FILES)


def test_one_writer_refuses_a_second_build_of_the_same_folder(tmp_path):
    calls: list[tuple] = []

    @one_writer
    def build(shards, index_dir: Path, *args, **kwargs) -> str:
        calls.append((shards, index_dir, args, kwargs))
        return "built"

    assert build.__name__ == "build"
    assert build(["s"], tmp_path / "idx", 1, k=2) == "built"
    assert calls == [(["s"], tmp_path / "idx", (1,), {"k": 2})]
    with OutputLock((tmp_path / "idx").resolve()):
        with pytest.raises(MultiViewError, match="another writer"):
            build(["s"], tmp_path / "idx")
    assert len(calls) == 1
