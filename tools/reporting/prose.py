"""Numbers in prose, checked against the records they quote.

A number in README.md or docs/*.md that quotes a record carries a tag right after it (an HTML comment, invisible
on the rendered page)::

    dcsr-mean + BM25 reaches **86.7**<!-- record: squad-sel300-hybrid:dcsr-mean-300+bm25 | answer_Top1 --> top-1

``record: PAIRS | FIELD [| AGGREGATE]``: ``PAIRS`` is ``record:system`` (several, comma-separated, for an
aggregate), ``FIELD`` a field of the row (``answer_Top1``, ``nDCG@10``, ``PPL``, ``hybrid_alpha``, …, or
``p_value`` / ``p_delta``: the row's paired test against dpr, made in its run or computed from the per-question
outcomes of dpr of the same setting and seed, as the tables do; ``dev@STEP`` / ``dev@best``: the row's dev curve
(``curves.dev``, the dev metric checked during training) at that step / its best value, in %; ``index_MB`` /
``index_MB_fp16``: the megabytes of the row's index vectors, as the results tables' "index MB" column / in
float16), ``AGGREGATE``
one of ``mean``, ``sd`` (sample standard deviation), ``min``, ``max`` over the pairs, or ``diff`` (the first minus
the second). The number written before the tag (``**``, ``%`` and a leading ``+`` or ``−`` allowed) must equal the
value rounded to as many decimals as it is written with (a p-value may also be written to two significant digits, as
the tables write it).

A number quoted from a committed benchmark log carries ``<!-- log: bench/NAME.log -->``: the log must hold a number
that rounds to it *in its own place*, on a line that shares a label with the page's words around the number (120
characters before it, 60 after, within its paragraph) -- a word or a whole number of two digits or more that is not
on most of the log's lines (``HNSW32 keeps 0.954`` in the page, ``syn-8views HNSW32 recall 0.954`` in the log). A
number replaced by another one of the same log, from another row or field, fails unless that row shares those
words too. Where the words around the number do not name the log's label, the tag names it:
``<!-- log: bench/NAME.log | LABEL -->`` (the number must then be on a line holding ``LABEL``, or within two lines
after one, as in a JSON object). A setting or a target that is no measurement (a flag's value, the significance
level) carries ``<!-- setting -->``; a number quoted from a paper carries ``<!-- paper: WHO YEAR, WHERE -->`` (its
source named, not checked: the papers are not in the repository).

A table or paragraph copied from logs need not tag each cell: a block ::

    <!-- logs: bench/calibration.log, bench/calibration.json -->
    | set | recall |
    | syn d64 | 0.9945 |
    <!-- /logs -->

(the two markers on lines of their own) requires every decimal between them, outside backticks and inline tags, to
be in one of the named files (committed logs or JSON, paths from the repository root): the file holds the number
as written, or a number that rounds to it at the written precision (``0.9945`` matches ``0.99453``; ``−``, ``+``
and thousands commas are ignored). Inline ``record:`` / ``log:`` / ``setting`` tags inside a block are checked as
elsewhere.

:func:`check` lists every tagged number that is not its record's value, and every tag that names no record,
row or field; :func:`untagged` lists the decimals of a page's prose (outside code blocks, tables and generated
sections) that carry no tag (a paper's section number, §5.2, is none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from multiview_plugin.evaluation.significance import at_floor
from tools.reporting import records as rec
from tools.reporting import sources, tables

# the tagged text of every page: its source under pages/ where it has one (tools/reporting/sources.py)
PAGES = [sources.source_of(p) for p in [rec.ROOT / "README.md", *sorted((rec.ROOT / "docs").glob("*.md"))]]
TAG = re.compile(r"(?P<num>[-+−]?\d[\d,]*(?:\.\d+)?)(?P<tail>[%*]*)\s*<!-- (?P<kind>record|log): (?P<spec>.*?) -->")
# a number that is a setting or a target (a flag's value, alpha), not a measurement; or a paper's number
SETTING = re.compile(r"(?P<num>[-+−]?\d[\d,]*(?:\.\d+)?)(?P<tail>[%*]*)\s*<!-- (?:setting|paper: [^>]+?) -->")
DECIMAL = re.compile(r"(?<![\w.@/§-])[-+−]?\d+\.\d+(?![\w.]*\d)")
AGGREGATES = ("mean", "sd", "min", "max", "diff")
BLOCK_OPEN = re.compile(r"^\s*<!-- logs: (?P<files>.*?) -->\s*$")
BLOCK_CLOSE = re.compile(r"^\s*<!-- /logs -->\s*$")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# the labels a log line and the page's words around a number share: words, and whole numbers of two digits or more
# (``top-100``; not the digits of a decimal or an exponent)
LABEL = re.compile(r"[A-Za-z][A-Za-z0-9]*|(?<![\d.eE])(?<![eE][-+])\d+(?![\d.])")
STOPWORDS = frozenset("the and for with from that this are was were has have its per one two all not but than then "
                      "into each what which when where who how".split())
LICENCE = re.compile(r"(?:CC BY(?:-SA)?|ODC-By) \d\.\d")  # a licence's version is no number to check


class ProseError(ValueError):
    """A tag that names no record, row or field, or has a malformed spec."""


def parse_spec(spec: str) -> tuple[list[tuple[str, str]], str, str | None]:
    parts = [p.strip() for p in spec.split("|")]
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ProseError(f"tag {spec!r}: expected 'record:system[, record:system] | field [| aggregate]'")
    pairs = []
    for item in parts[0].split(","):
        name, sep, system = item.strip().partition(":")
        if not sep or not name or not system:
            raise ProseError(f"tag {spec!r}: {item.strip()!r} is not record:system")
        pairs.append((name, system))
    aggregate = parts[2] if len(parts) == 3 else None
    if aggregate is not None and aggregate not in AGGREGATES:
        raise ProseError(f"tag {spec!r}: aggregate {aggregate!r} is not one of {', '.join(AGGREGATES)}")
    if aggregate is None and len(pairs) != 1:
        raise ProseError(f"tag {spec!r}: several rows need an aggregate ({', '.join(AGGREGATES)})")
    return pairs, parts[1], aggregate


def row_value(name: str, system: str, field: str, cache: dict) -> float:
    """``field`` of row ``system`` in record ``name`` (p_value / p_delta: its paired test against dpr)."""
    try:
        record = cache.setdefault(("record", name), None) or rec.load_record(name)
    except KeyError as err:
        raise ProseError(str(err).strip("'\"")) from None
    cache[("record", name)] = record
    row = next((r for r in record["rows"] if r["system"] == system), None)
    if row is None:
        raise ProseError(f"record {name!r} has no row {system!r}")
    if field in row and row[field] is not None:
        return float(row[field])
    if field in ("index_MB", "index_MB_fp16"):
        backbone = row.get("backbone", Path(rec.record_settings(record).backbone).name)
        mb = tables.index_mb(row, backbone) if field == "index_MB" else row.get("index_bytes_fp16", 0) / 1e6
        if mb:
            return mb
    dev = re.fullmatch(r"dev@(best|\d+)", field)
    curve = (row.get("curves") or {}).get("dev") if isinstance(row.get("curves"), dict) else None
    if dev and curve:
        at = [v for s, v in curve if dev.group(1) == "best" or s == int(dev.group(1))]
        if at:
            return 100 * max(at)
    if field in ("p_value", "p_delta"):
        data = rec.record_settings(record).data
        groups = cache.get(("groups", data)) or rec.seed_groups(data)
        cache[("groups", data)] = groups
        for g in groups:
            for seed, r in g["seeds"].items():
                if r["_record"] == name and r["system"] == system and g["tests"].get(seed, {}).get(field) is not None:
                    return float(g["tests"][seed][field])
    raise ProseError(f"record {name!r} row {system!r} has no {field!r}")


def p_test(spec: str, cache: dict) -> str | None:
    """The test behind a ``p_value`` tag's number (the row's ``p_test``, or its seed group's), None for others."""
    pairs, field, aggregate = parse_spec(spec)
    if field != "p_value" or aggregate is not None:
        return None
    name, system = pairs[0]
    record = cache.get(("record", name)) or rec.load_record(name)
    row = next((r for r in record["rows"] if r["system"] == system), {})
    if row.get("p_value") is not None:
        return row.get("p_test")
    for g in cache.get(("groups", rec.record_settings(record).data)) or []:
        for seed, r in g["seeds"].items():
            if r["_record"] == name and r["system"] == system:
                return g["tests"].get(seed, {}).get("p_test")
    return None


def floor_unmarked(text: str, m: re.Match, v: float, cache: dict) -> str | None:
    """Why a p-value at its Monte Carlo test's floor is written as if measured (``p = 0.0001`` for a p that only
    says no sampled sign pattern was as extreme: write ``p < 0.0001``), else None."""
    floor = at_floor(v, p_test(m.group("spec"), cache))
    if floor and not text[max(0, m.start() - 3):m.start()].rstrip().endswith("<"):
        return f"is {m.group('num')}, the floor of its test ({floor} sign flips): write < {1 / floor:.2g}"
    return None


def value(spec: str, cache: dict | None = None) -> float:
    """The number a tag's spec names."""
    cache = {} if cache is None else cache
    pairs, field, aggregate = parse_spec(spec)
    values = [row_value(n, s, field, cache) for n, s in pairs]
    if aggregate is None:
        return values[0]
    if aggregate == "mean":
        return sum(values) / len(values)
    if aggregate == "sd":
        if len(values) < 2:
            raise ProseError(f"tag {spec!r}: sd needs two rows or more")
        mean = sum(values) / len(values)
        return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    if aggregate == "diff":
        if len(values) != 2:
            raise ProseError(f"tag {spec!r}: diff needs exactly two rows")
        return values[0] - values[1]
    return min(values) if aggregate == "min" else max(values)


def written_forms(v: float, written: str) -> set[str]:
    """How ``v`` may be written to match ``written``: rounded to its decimals; two significant digits."""
    decimals = len(written.split(".", 1)[1]) if "." in written else 0
    return {f"{v:.{decimals}f}", f"{v:.2g}", f"{abs(v):.{decimals}f}" if written.startswith(("-", "−")) else ""}


def normalise(number: str) -> str:
    return number.replace("−", "-").replace(",", "").lstrip("+")


def in_log(written: str, log: str, cache: dict | None = None) -> bool:
    """Whether ``log`` holds a number that, rounded to ``written``'s decimals, is ``written``."""
    decimals = len(written.split(".", 1)[1]) if "." in written else 0
    cache = {} if cache is None else cache
    key = ("rounded", id(log), decimals)
    if key not in cache:
        numbers = cache.setdefault(("numbers", id(log)), {float(x) for x in NUMBER.findall(log)})
        cache[key] = {f"{x:.{decimals}f}" for x in numbers} | {f"{abs(x):.{decimals}f}" for x in numbers if x < 0}
    return written in cache[key]


def labels(text: str) -> set[str]:
    """The labels of a text: its words of three letters or more (lower-cased, common words left out) and its
    numbers of two digits or more."""
    return {t.lower() for t in LABEL.findall(text) if len(t) >= (2 if t.isdigit() else 3)} - STOPWORDS


def holds(written: str, line: str) -> bool:
    """Whether ``line`` holds a number that, rounded to ``written``'s decimals, is ``written``."""
    decimals = len(written.split(".", 1)[1]) if "." in written else 0
    return any(f"{abs(float(x)):.{decimals}f}" == written.lstrip("-") for x in NUMBER.findall(line))


def words_around(text: str, start: int, end: int, before: int = 120, after: int = 60) -> str:
    """The page's words around ``text[start:end]`` (a tagged number): ``before`` characters before it and
    ``after`` after it, within its paragraph, without tags. Near enough to name the number's own row or field,
    not its neighbours' (with whole sentences, a substituted number of the same log passed four times in five)."""
    first = text.rfind("\n\n", 0, start)
    first = 0 if first < 0 else first + 2
    last = text.find("\n\n", end)
    last = len(text) if last < 0 else last
    return re.sub(r"<!--.*?-->", " ", text[max(first, start - before):start] + " " + text[end:min(last, end + after)])


def log_places(path: str, log: str, cache: dict) -> tuple[list[str], list[set[str]]]:
    """A log's lines, and the labels that name each line's place: its labels that are not on most of the log's
    lines, or all of them where none is rarer (every line of a training log has the same keys)."""
    key = ("places", path)
    if key not in cache:
        lines = log.splitlines()
        places = [labels(line) for line in lines]
        counts: dict[str, int] = {}
        for place in places:
            for label in place:
                counts[label] = counts.get(label, 0) + 1
        common = {label for label, n in counts.items() if n > max(2, len(lines) / 2)}
        cache[key] = (lines, [(place - common) or place for place in places])
    return cache[key]


def misplaced(written: str, spec: str, log: str, context: str, cache: dict) -> str | None:
    """Why a log's number is not the one the page quotes there (None: it is): on no line that shares a label
    with the words around it, or, with ``LABEL`` named in the tag, on no line holding it."""
    path, _, label = (part.strip() for part in spec.partition("|"))
    lines, places = log_places(path, log, cache)
    hits = [i for i, line in enumerate(lines) if holds(written, line)]
    if label:
        if any(label.lower() in " ".join(lines[max(0, i - 2):i + 1]).lower() for i in hits):
            return None
        return f"is in {path}, but on no line with {label!r} (or two lines below one)"
    around = labels(context)
    if any(places[i] & around for i in hits):
        return None
    return (f"is in {path}, but on no line that shares a label with the words around it here (another row's number?): "
            f"name the log's label, <!-- log: {path} | LABEL -->")


def blocks(text: str) -> tuple[list[tuple[int, int, str]], list[str]]:
    """The ``<!-- logs: ... -->`` blocks of ``text``: ``(first line, last line, files)`` (the marker lines), and
    one problem per marker without its pair."""
    found, problems, start = [], [], None
    for i, line in enumerate(text.splitlines(), 1):
        if BLOCK_OPEN.match(line):
            if start is not None:
                problems.append(f"{start[0]}: <!-- logs: --> block not closed before line {i}")
            start = (i, BLOCK_OPEN.match(line).group("files"))
        elif BLOCK_CLOSE.match(line):
            if start is None:
                problems.append(f"{i}: <!-- /logs --> without an opening <!-- logs: ... -->")
            else:
                found.append((start[0], i, start[1]))
                start = None
    if start is not None:
        problems.append(f"{start[0]}: <!-- logs: --> block not closed")
    return found, problems


def read_log(path: str, cache: dict) -> str | None:
    """A committed log's text (``None`` when there is no such file), read once per check."""
    key = ("log", path)
    if key not in cache:
        file = rec.ROOT / path
        cache[key] = file.read_text(encoding="utf-8", errors="replace") if file.is_file() else None
    return cache[key]


def bare(line: str) -> str:
    """``line`` without code spans, licences and tagged numbers: what is left are the numbers no tag covers."""
    return SETTING.sub("", TAG.sub("", LICENCE.sub("", re.sub(r"`[^`]*`", "", line))))


def check_blocks(text: str, where: str, cache: dict) -> list[str]:
    """One line per decimal of a ``<!-- logs: -->`` block that none of its files holds (or per broken marker)."""
    found, problems = blocks(text)
    problems = [f"{where}:{p}" for p in problems]
    lines = text.splitlines()
    for first, last, files in found:
        paths = [f.strip() for f in files.split(",") if f.strip()]
        logs = []
        for path in paths:
            log = read_log(path, cache)
            if log is None:
                problems.append(f"{where}:{first}: no log {path}")
            else:
                logs.append(log)
        if not paths:
            problems.append(f"{where}:{first}: <!-- logs: --> names no file")
        if len(logs) != len(paths):
            continue
        for i in range(first + 1, last):
            for m in DECIMAL.finditer(bare(lines[i - 1])):
                if not any(in_log(normalise(m.group(0)), log, cache) for log in logs):
                    problems.append(f"{where}:{i}: {m.group(0)} is not in {', '.join(paths)}")
    return problems


def tags_in_code(text: str, where: str) -> list[str]:
    """One line per code span (outside fenced blocks) holding a tagged number: the tag would render as text."""
    fenced, lines = False, []
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        lines.append("" if fenced or line.strip().startswith("```") else line)
    prose = "\n".join(lines)
    return [f"{where}:{prose.count(chr(10), 0, m.start()) + 1}: a tag inside a code span renders as text: "
            f"{m.group(0)[:60]!r}" for m in re.finditer(r"`[^`]+`", prose)
            if TAG.search(m.group(0)) or SETTING.search(m.group(0))]


def check_text(text: str, where: str, cache: dict | None = None) -> list[str]:
    """One line per tagged number of ``text`` that is not its record's value (or whose tag is broken)."""
    cache = {} if cache is None else cache
    problems = []
    for m in TAG.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m.group("kind") == "log":
            path = m.group("spec").partition("|")[0].strip()
            log = read_log(path, cache)
            if log is None:
                problems.append(f"{where}:{line}: no log {path}")
            elif not in_log(normalise(m.group("num")), log, cache):
                problems.append(f"{where}:{line}: {m.group('num')} is not in {path}")
            else:
                why = misplaced(normalise(m.group("num")), m.group("spec"), log,
                                words_around(text, m.start(), m.end()), cache)
                if why:
                    problems.append(f"{where}:{line}: {m.group('num')} {why}")
            continue
        try:
            v = value(m.group("spec"), cache)
        except ProseError as err:
            problems.append(f"{where}:{line}: {err}")
            continue
        written = normalise(m.group("num"))
        forms = {normalise(f) for f in written_forms(v, written) if f}
        if written.startswith("-"):
            forms |= {"-" + f for f in forms if not f.startswith("-")}
        if written not in forms and written.lstrip("-") not in {f for f in forms if v >= 0}:
            problems.append(f"{where}:{line}: is {m.group('num')}, the record gives {v:.4g} "
                            f"({m.group('spec').strip()})")
        elif why := floor_unmarked(text, m, v, cache):
            problems.append(f"{where}:{line}: {why}")
    return problems + check_blocks(text, where, cache) + tags_in_code(text, where)


def check(pages: Iterable[Path] = PAGES) -> list[str]:
    """:func:`check_text` over ``pages``."""
    cache: dict = {}
    problems = []
    for page in pages:
        where = page.relative_to(rec.ROOT) if page.is_relative_to(rec.ROOT) else page
        if not page.is_file():
            problems.append(f"{where}: no such page")
            continue
        problems += check_text(page.read_text(encoding="utf-8"), str(where), cache)
    return problems


def prose_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the prose: outside code blocks and generated sections (``<!-- name:start -->`` or
    ``<!-- name:start (how it is generated) -->`` … ``<!-- name:end -->``; each generator checks its own section).
    Hand-written tables count."""
    out, fenced, generated = [], False, False
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        if re.match(r"<!-- [\w-]+:start( \(.*\))? -->", stripped):
            generated = True
        if re.match(r"<!-- [\w-]+:end -->", stripped):
            generated = False
            continue
        if fenced or generated:
            continue
        out.append((i, line))
    return out


def untagged(text: str) -> list[tuple[int, str]]:
    """The decimals of ``text``'s prose without a record tag: ``(line, number)``. Numbers in backticks (flags,
    commands, file names) and inside ``<!-- logs: -->`` blocks (checked against their files) do not count."""
    in_block = {i for first, last, _ in blocks(text)[0] for i in range(first, last + 1)}
    return [(i, m.group(0)) for i, line in prose_lines(text) if i not in in_block for m in DECIMAL.finditer(bare(line))]
