"""Writing files so that they appear complete or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str = "utf-8", fsync: bool = False
                ) -> Iterator[IO]:
    """Open ``path`` for writing (``mode`` ``"w"`` or ``"wb"``) so that it appears complete or not at all.

    Writes to a temporary file in the same folder and moves it over ``path`` (:func:`os.replace`) when the
    ``with`` block ends without an exception; on an exception the temporary file is removed and ``path`` is
    left untouched. Parent folders are created. ``fsync`` flushes the data to disk before the rename (for files
    a resumed job relies on).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes with mode 'w' or 'wb', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # not tempfile.mkstemp: its files are private (0600); this one gets the usual umask permissions
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    text = mode == "w"
    try:
        with open(tmp, "x" if text else "xb", encoding=encoding if text else None, newline="\n" if text else None) as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        named = with_path(err, path)
        if named is err:
            raise
        raise named from err


def with_path(err: BaseException, path: str | os.PathLike) -> BaseException:
    """``err`` naming ``path`` when it is an OSError without a file name (a failed write, e.g. a full disk)."""
    if isinstance(err, OSError) and err.filename is None and err.errno is not None:
        return type(err)(err.errno, f"{err.strerror} (writing {path})")
    return err


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> Path:
    """Write ``lines``, each newline-terminated, to ``path`` atomically (UTF-8); returns the path."""
    with atomic_open(path) as f:
        f.writelines(line + "\n" for line in lines)
    return Path(path)


def write_jsonl(path: str | os.PathLike, rows: Iterable[object]) -> Path:
    """One JSON object per line (non-ASCII kept as is), atomically; returns the path."""
    return write_lines(path, (json.dumps(row, ensure_ascii=False) for row in rows))
