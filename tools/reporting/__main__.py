"""The tables of docs/results.md and the README, generated from committed run records, and the prose numbers
that quote them, checked.

    # record a finished run (its results.json) under results/<data>/<name>.json, with the command that made it
    python -m tools.reporting add runs/scifact --name scifact-all \
        --command "python -m multiview_plugin.quickstart --data scifact --beir_dir $DATA/beir/scifact ..."
    # rewrite docs/results.md's tables (between the results markers) from everything in results/, and the
    # README's tables (quickstart, transfer, headline markers)
    python -m tools.reporting render
    # the same, without writing: exit 1 and print one line per difference when a table is not what the records
    # give, or a number of README.md or a docs page tagged <!-- record: ... --> / <!-- log: ... --> (or inside a
    # <!-- logs: ... --> block) is not its record's or log's value
    python -m tools.reporting check
    # a fresh quickstart run reproduces the README's quickstart table (the committed quickstart-default record)
    python -m multiview_plugin.quickstart --output_dir /tmp/qs && \
        python -m tools.reporting check-quickstart /tmp/qs/results.json
    # a peer system trained by another script (bench/colbert_peer.py): its command, and the quickstart command
    # whose protocol (data, budget, dev selection) it reproduces, which gives the row its settings
    python -m tools.reporting add RUN_DIR --name squad-sel-colbert-pylate \
        --command "python bench/colbert_peer.py ..." \
        --protocol "python -m multiview_plugin.quickstart --data squad ... --systems dpr"

What the tables name and show (data sets, system names, the README's method-table rows) is in
results/presentation.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.reporting import pages, prose, records, tables

PROG = "python -m tools.reporting"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="Record a run's results.json.")
    a.add_argument("run_dir", type=Path, help="A quickstart --output_dir holding results.json.")
    a.add_argument("--name", required=True, help="Record name (results/<data>/<name>.json).")
    a.add_argument("--command", required=True, help="The exact command that produced the run.")
    a.add_argument("--systems", nargs="+", help="Keep only these systems' rows.")
    a.add_argument("--protocol", help="For a run made by another script (a peer system): the quickstart command "
                   "whose protocol it reproduces; the table reads the row's settings from it.")
    r = sub.add_parser("render", help="Rewrite docs/results.md's tables and the README's tables.")
    c = sub.add_parser("check", help="Exit 1, one line per difference, when a generated table is not current or a "
                       "tagged prose number is not its record's value.")
    for s in (r, c):
        s.add_argument("--out", type=Path, default=pages.RESULTS_PAGE, help="The results page (default "
                       "docs/results.md).")
        s.add_argument("--readme", type=Path, default=pages.README, help="The page with the quickstart, transfer "
                       "and headline tables (default README.md).")
    c.add_argument("--prose", type=Path, nargs="*", default=None, help="Pages whose tagged prose numbers are "
                   f"checked (default: {', '.join(str(p.relative_to(records.ROOT)) for p in prose.PAGES)}).")
    q = sub.add_parser("check-quickstart", help="Exit 1 when a quickstart run's results.json does not give the "
                       "README's quickstart table (the committed quickstart-default record).")
    q.add_argument("results_json", type=Path, help="results.json of `python -m multiview_plugin.quickstart`.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "add":
        records.add(args.run_dir, args.name, args.command, args.systems, args.protocol)
    elif args.cmd == "check":
        missing = [str(p) for p in [args.out, args.readme, *(args.prose or [])] if not p.is_file()]
        if missing:  # one line, before anything is read
            print(f"error: no such page: {', '.join(missing)}", file=sys.stderr)
            return 2
        problems = pages.check(args.out, args.readme) + pages.stale_published()
        problems += prose.check(args.prose if args.prose is not None else prose.PAGES)
        for line in problems:
            print(line)
        if problems:
            print(f"stale: run {PROG} render, or fix the prose ({len(problems)} differences)", file=sys.stderr)
            return 1
        checked = args.prose if args.prose is not None else prose.PAGES
        print(f"{args.out.name} and {args.readme.name}: tables match the records; the tagged numbers of {len(checked)} "
              "pages match their records and logs")
    elif args.cmd == "check-quickstart":
        rows = json.loads(args.results_json.read_text(encoding="utf-8"))
        want = pages.quickstart_record()
        if want is None:
            print(f"error: no committed record {pages.QUICKSTART_RECORD}", file=sys.stderr)
            return 2
        have_table, want_table = tables.quickstart_table({"rows": rows}), tables.quickstart_table(want)
        problems = pages.diff_lines(args.results_json, have_table, want_table)
        for line in problems:
            print(line)
        if problems:
            print(f"the quickstart run does not reproduce the README's table ({len(problems)} rows differ)",
                  file=sys.stderr)
            return 1
        print(f"{args.results_json}: the quickstart run reproduces the README's quickstart table")
    else:
        pages.render(args.out, args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
