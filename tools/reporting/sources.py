"""Pages written from a tagged source: the published page carries no tags.

A page whose numbers are checked (README.md, docs/*.md) may have a source under ``pages/``, at the same path
(``pages/README.md`` for ``README.md``, ``pages/docs/results.md`` for ``docs/results.md``). The source holds the
prose with its tags (``<!-- record: ... -->``, ``<!-- log: ... -->``, ``<!-- setting -->``, ``<!-- paper: ... -->``
and the ``<!-- logs: -->`` block markers, :mod:`tools.reporting.prose`) and the generated tables; the published page
is the source without those tags, so it reads as plain prose. ``python -m tools.reporting render`` writes the
published pages, and ``check`` fails, naming the line, when one is not its source's rendering (edit the source,
never the published page). A page without a source is its own source.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.reporting import records as rec

SOURCES = rec.ROOT / "pages"
INLINE = re.compile(r"<!-- (?:record|log|paper): .*? -->|<!-- setting -->")
BLOCK_LINE = re.compile(r"^\s*<!-- (?:logs: .*?|/logs) -->\s*$")


def source_of(page: Path) -> Path:
    """The source of a published ``page`` (the page itself when it has none)."""
    page = Path(page).resolve()
    if not page.is_relative_to(rec.ROOT):
        return page
    src = SOURCES / page.relative_to(rec.ROOT)
    return src if src.is_file() else page


def published_of(src: Path) -> Path:
    """The page a source under ``pages/`` publishes (a page that is not under ``pages/`` is its own)."""
    src = Path(src).resolve()
    return rec.ROOT / src.relative_to(SOURCES) if src.is_relative_to(SOURCES) else src


def sources() -> list[Path]:
    """Every source under ``pages/``."""
    return sorted(SOURCES.rglob("*.md")) if SOURCES.is_dir() else []


CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


def strip_line(line: str) -> str:
    """``line`` without its number tags; a tag shown in a code span (documentation of the syntax) stays."""
    out, last = [], 0
    for m in CODE_SPAN.finditer(line):
        out += [INLINE.sub("", line[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join([*out, INLINE.sub("", line[last:])])


def strip(text: str) -> str:
    """``text`` without its number tags and ``<!-- logs: -->`` block markers (generated-table markers and code
    spans stay)."""
    return "".join(strip_line(line) for line in text.splitlines(keepends=True) if not BLOCK_LINE.match(line))


def published(write: bool) -> list[tuple[Path, Path, str, str]]:
    """Write (``write``) every published page from its source, or list the pages that are not their source's
    rendering: ``(page, source, what the page holds, what it should hold)``."""
    stale = []
    for src in sources():
        page, want = published_of(src), strip(src.read_text(encoding="utf-8"))
        if write:
            page.write_text(want, encoding="utf-8")
            continue
        have = page.read_text(encoding="utf-8") if page.is_file() else ""
        if have != want:
            stale.append((page, src, have, want))
    return stale
