"""Output paths that cannot destroy inputs (bottom floor: imports nothing of the package but its errors).

Every driver routes its outputs through these helpers:

- :func:`refuse_output_over_input`: an output that resolves to one of the run's inputs (same path after
  symlinks, or the same file through a hard link) is refused before anything is written.
- :func:`check_output_folder` / :func:`swap_in_folder`: a folder output (an index) is only ever *replaced*
  when it is one of ours and the user asked (``--overwrite``); the new one is built in a temporary sibling and
  swapped in with renames once complete, the old one kept until then.
- :class:`OutputLock`: one writer per output (a :mod:`filelock` OS lock); a second one is refused while the
  first runs, and a lock left by a killed process (the kernel released it) is taken over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from multiview_plugin.errors import ConfigError, MultiViewError

if TYPE_CHECKING:
    from filelock import BaseFileLock

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
LOCK_MARKER = "multiview_plugin output lock, pid"  # the lock's one line: "<marker> <pid>"


def same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name the same file: equal resolved paths (through symlinks), or, when both
    exist, the same inode (hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


def _inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def refuse_output_over_input(outputs: Mapping[str, str | os.PathLike | None],
                             inputs: Mapping[str, str | os.PathLike | Iterable[str | os.PathLike] | None],
                             folder_outputs: Iterable[str] = ()) -> None:
    """Raise :class:`ConfigError` when an output is one of the inputs.

    ``outputs`` / ``inputs``: flag name (``--output``) → path (or several paths for an input; None: unset).
    ``folder_outputs``: the output flags that name folders: an input *inside* such a folder is refused too
    (writing or replacing the folder could destroy it).
    """
    folders = set(folder_outputs)
    for out_flag, out in outputs.items():
        if not out:
            continue
        for in_flag, given in inputs.items():
            if not given:
                continue
            paths = [given] if isinstance(given, (str, os.PathLike)) else list(given)
            for path in paths:
                if not path:
                    continue
                if same_path(out, path):
                    raise ConfigError(f"{out_flag} {out} is the same file as {in_flag} {path}: writing it would "
                                      "destroy the input; choose another output path")
                if out_flag in folders and _inside(path, out):
                    raise ConfigError(f"{out_flag} {out} holds the input {in_flag} {path}: writing the folder "
                                      "could destroy it; choose another output folder")


def check_output_folder(folder: str | os.PathLike, is_ours: bool, overwrite: bool, what: str,
                        own_files: Iterable[str] | None = None, flag: str = "--overwrite") -> None:
    """Refuse to write ``folder`` unless it is absent, empty, or one of ours being replaced on request.

    ``is_ours``: whether ``folder`` holds one of our outputs (e.g. an index's ``multiview.json``).
    ``own_files``: names such a folder may hold; anything else in it (a user's file) blocks replacing it.
    """
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    if not folder.is_dir():
        raise ConfigError(f"{folder} exists and is not a folder; choose another output path for the {what}")
    entries = sorted(p.name for p in folder.iterdir())
    if not entries:
        return
    if not is_ours:
        raise ConfigError(f"{folder} is not empty and is not a {what} (it holds {', '.join(entries[:3])}"
                          f"{' ...' if len(entries) > 3 else ''}); refusing to replace it: choose a new or empty "
                          "folder")
    if not overwrite:
        raise ConfigError(f"{folder} already holds a {what}; pass {flag} to replace it")
    if own_files is not None:
        foreign = [name for name in entries if name not in set(own_files)]
        if foreign:
            raise ConfigError(f"{folder} holds a {what} and also {', '.join(foreign[:3])}, which it did not write; "
                              f"refusing to replace the folder (move those files out first)")


def swap_in_folder(new: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move the complete folder ``new`` to ``target`` (same file system), replacing ``target`` only now.

    The old ``target`` (already checked by :func:`check_output_folder`) is renamed aside first, then ``new`` is
    renamed into place, then the old one is removed; should the second rename fail, the old one is put back.
    An empty ``target`` folder is simply removed.
    """
    new, target = Path(new), Path(target)
    if not target.exists():
        os.replace(new, target)
        return
    if target.is_dir() and not any(target.iterdir()):
        target.rmdir()
        os.replace(new, target)
        return
    aside = target.with_name(f".{target.name}.old.{secrets.token_hex(4)}")
    os.replace(target, aside)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


class WriterBusyError(MultiViewError):
    """Another process is writing the same output."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return False
    return True


class _NotOurs(Exception):
    """Raised inside filelock's ``on_acquired`` callback: gives the lock back (the file is left as it was)."""

    def __init__(self, error: MultiViewError):
        super().__init__(str(error))
        self.error = error


class OutputLock:
    """``<output>.lock``: an OS lock taken with :mod:`filelock` (``flock``; released by the kernel when its
    process dies, ``kill -9`` included), the file holding one line, :data:`LOCK_MARKER` and the writer's pid.

    A second writer of the same output is refused at once (:class:`WriterBusyError`, non-blocking acquire) while
    the first holds it; a lock file of ours whose holder is gone (a killed writer) is taken over, with a warning
    when its pid no longer runs. A file at the lock's path that is not ours (any content but the marker line, or
    an empty file that was there before) is never written to or removed: a one-line error. On release the file
    is removed only while it still holds this process's line; filelock refuses an inode unlinked meanwhile.
    """

    def __init__(self, output: str | os.PathLike):
        self.output = Path(output)
        self.path = self.output.with_name(self.output.name + LOCK_SUFFIX)
        self.held = False
        self._lock: BaseFileLock | None = None
        self._seen: tuple[int, int] | None = None  # the (device, inode) at the lock's path before acquiring

    def acquire(self) -> OutputLock:
        from filelock import FileLock, Timeout

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._seen = None
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            self._seen = (st.st_dev, st.st_ino)
        lock = FileLock(self.path, timeout=0, thread_local=False, on_acquired=self._claim)
        try:
            lock.acquire()
        except Timeout:
            pid = self._owner()
            holder = f"another writer (pid {pid})" if pid is not None else "another writer"
            raise WriterBusyError(f"{self.output}: {holder} holds it ({self.path}); wait for it to finish or "
                                  "choose another output path") from None
        except _NotOurs as refused:
            raise refused.error from None
        self._lock, self.held = lock, True
        return self

    def _claim(self, fd: int) -> None:
        """filelock's ``on_acquired``: write this process's line into a lock file of ours, or give it back."""
        st = os.fstat(fd)
        content = os.pread(fd, len(LOCK_MARKER) + 32, 0)
        pid = self._parse(content)
        if content and pid is None:
            raise _NotOurs(ConfigError(
                f"{self.path} exists and is not a multiview_plugin lock (its line does not start with "
                f"{LOCK_MARKER!r}): refusing to remove it; move it away or choose another output path"))
        if not content and self._seen == (st.st_dev, st.st_ino):  # an empty file that was there before us
            import time

            if time.time() - st.st_mtime < 5:  # filelock's create-then-lock of another writer, mid-way
                raise _NotOurs(WriterBusyError(f"{self.output}: another writer is starting ({self.path}); wait "
                                               "for it or choose another output path"))
            raise _NotOurs(ConfigError(
                f"{self.path} exists and is not a multiview_plugin lock (it is empty and old): refusing to remove "
                "it; move it away or choose another output path"))
        if pid is not None and pid != os.getpid() and not _pid_alive(pid):
            logger.warning("%s: taking over a stale lock (pid %s is not running)", self.path, pid)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{LOCK_MARKER} {os.getpid()}\n".encode(), 0)

    @staticmethod
    def _parse(content: bytes) -> int | None:
        """The pid of a lock line of ours; None for anything else (an empty file, someone's file)."""
        try:
            marker, _, pid = content.decode("utf-8").strip().rpartition(" ")
            return int(pid) if marker == LOCK_MARKER else None
        except ValueError:  # UnicodeDecodeError included
            return None

    def _owner(self) -> int | None:
        """The pid the lock file at our path records; None for anything else."""
        try:
            with self.path.open("rb") as f:
                return self._parse(f.read(len(LOCK_MARKER) + 32))
        except OSError:
            return None

    def release(self) -> None:
        """Remove the lock file while still holding it (only if it still holds this process's line), then
        release the OS lock."""
        if not self.held:
            return
        with contextlib.suppress(OSError):
            if self._owner() == os.getpid():
                os.unlink(self.path)
        self._lock.release()
        self._lock, self.held = None, False

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
