"""An index folder's files and the rules for writing one: the names a build writes, the one check every
backend applies to ``--index_dir`` before writing in it, and the lock that lets one build at a time write it."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from multiview_plugin.encoding.view_info import INDEX_VIEWS_FILE
from multiview_plugin.paths import OutputLock, check_output_folder

_Built = TypeVar("_Built")

INDEX_FILE, DOCID_FILE, META_FILE = "index", "docid", "multiview.json"
DOC_INDEX_FILE = "doc_index"  # optional: one vector per document (its views' normalised mean), for candidates
RESCORE_STORE_FILE = "rescore_views.npy"  # optional: every view vector, in row order, for exact re-scoring
# everything build_index writes: a folder holding anything else is not replaced by --overwrite
INDEX_FOLDER_FILES = (INDEX_FILE, DOCID_FILE, META_FILE, DOC_INDEX_FILE, INDEX_VIEWS_FILE, RESCORE_STORE_FILE)
# the files whose identity multiview.json records (IndexMeta.files) and searchers check when they load them
FINGERPRINTED_FILES = (INDEX_FILE, DOCID_FILE, DOC_INDEX_FILE, RESCORE_STORE_FILE)


def check_index_folder(index_dir: str | os.PathLike, overwrite: bool, own_files: Sequence[str] = (),
                       resumable: Sequence[str] = ()) -> None:
    """The one rule every backend applies to ``--index_dir`` before writing anything in it.

    A folder without ``multiview.json`` is not ours: it must be absent or empty, except an interrupted build's
    folder that holds only ``resumable`` names (a backend that resumes: e.g. Qdrant's storage and temporary
    files). A folder with it is replaced only with ``overwrite`` and only when it holds nothing but what
    a build writes (:data:`INDEX_FOLDER_FILES` and ``own_files``). So someone's Pyserini index (``index``,
    ``docid``, no ``multiview.json``) is never written into, whatever the backend.
    """
    index_dir = Path(index_dir)
    ours = (index_dir / META_FILE).is_file()
    if not ours and resumable and index_dir.is_dir():
        entries = [p.name for p in index_dir.iterdir()]
        if entries and all(name in resumable for name in entries):
            return  # an interrupted build of this backend: it resumes
    check_output_folder(index_dir, ours, overwrite, "multiview index",
                        own_files=(*INDEX_FOLDER_FILES, *own_files, *resumable))


def index_files(folder: str | os.PathLike | None) -> list[str]:
    """The files of an index folder (inputs that no output may overwrite); none when ``folder`` is None."""
    return [os.path.join(folder, name) for name in INDEX_FOLDER_FILES] if folder else []


def one_writer(build: Callable[..., _Built]) -> Callable[..., _Built]:
    """Run an index build (``build(shards, index_dir, ...)``) under ``<index_dir>.lock`` (:class:`OutputLock`):
    a second build of the same folder, by any backend, is refused in one line while the first runs, and touches
    nothing of it (its checks, temporary files and clean-up all happen inside the lock)."""

    @functools.wraps(build)
    def locked(shards, index_dir, *args, **kwargs) -> _Built:
        with OutputLock(Path(index_dir).resolve()):
            return build(shards, index_dir, *args, **kwargs)

    return locked
