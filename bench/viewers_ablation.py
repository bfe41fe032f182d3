"""What the MVR viewers add on top of segment views: paired tests between two recorded systems of the same seed.

For each seed, from the committed records' per-question ranks (results/squad/*.json): segment views + MVR viewers
(`--mvr_views region --mvr_view_init segments`) against its viewers-off twin (`--mvr_viewers off`: views are the
segment means alone), and each against dpr of the same budget and seed. The test is the reporting tool's
(evaluation/significance.py, `compare_ranks`: two-sided paired randomization on top-1 hits, 10,000 seeded sign
flips, exact for few differences).

    python bench/viewers_ablation.py > bench/viewers_ablation.log

A seed whose records are not all committed yet is listed as missing, not tested.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from multiview_plugin.evaluation.significance import (  # noqa: E402
    RANDOMIZATION,
    compare_ranks,
    format_p,
    hits_at,
    paired_randomization_test,
)

# seed -> (variant record, viewers-off record, dpr record of the same budget and seed)
SEEDS = {
    42: ("squad-sel-segment-views-mvr-viewers", "squad-sel-segment-views-viewers-off", "squad-sel-dpr-rerun"),
    7: ("squad-sel-segment-views-mvr-viewers-seed7", "squad-sel-segment-views-viewers-off-seed7",
        "squad-sel-dpr-seed7-rerun"),
}


def row(name: str) -> dict | None:
    """The one row of a committed record (None while the record is not there)."""
    path = ROOT / "results" / "squad" / f"{name}.json"
    if not path.exists():
        return None
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    if len(rows) != 1:
        raise SystemExit(f"{path.relative_to(ROOT)}: expected one row, found {len(rows)}")
    return rows[0]


def line(label: str, a: dict, b: dict) -> str:
    t = compare_ranks(a["per_query"]["ranks"], b["per_query"]["ranks"])
    return (f"  {label}: top-1 {a['answer_Top1']:.2f} vs {b['answer_Top1']:.2f}, delta {t['p_delta']:+.2f}, "
            f"p {format_p(t['p_value'], t['p_test'])} ({t['p_test']})")


def pooled(pairs: list[tuple[dict, dict]]) -> str:
    """The viewers' effect over every tested seed at once, questions as the unit: each question's top-1 hits
    summed over the seeds (0 to the number of seeds) for each system, one sign flip per question (the seeds ask
    the same questions, so a question's outcomes across seeds are not independent draws)."""
    a = sum(hits_at(v["per_query"]["ranks"], 1) for v, _ in pairs)
    b = sum(hits_at(o["per_query"]["ranks"], 1) for _, o in pairs)
    p = paired_randomization_test(a, b)
    test = f"{RANDOMIZATION} (two-sided, per-question sums over seeds, 10000 sign flips, seed 0)"
    mean = sum(v["answer_Top1"] - o["answer_Top1"] for v, o in pairs) / len(pairs)
    return (f"seeds pooled ({len(pairs)} seeds, {len(a)} questions): segment views + MVR viewers vs viewers off: "
            f"mean delta {mean:+.2f}, p {format_p(p, test)} ({test})")


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(f"# command: python bench/viewers_ablation.py  (git {commit}, {time.strftime('%Y-%m-%d %H:%M:%S')})")
    tested = []
    for seed, names in SEEDS.items():
        variant, off, dpr = (row(n) for n in names)
        missing = [n for n, r in zip(names, (variant, off, dpr)) if r is None]
        if missing:
            print(f"seed {seed}: not tested, records missing: {', '.join(missing)}")
            continue
        print(f"seed {seed} ({', '.join(names)})")
        print(line("segment views + MVR viewers vs viewers off", variant, off))
        print(f"  view PPL {variant['PPL']:.2f} vs {off['PPL']:.2f}")
        print(line("segment views + MVR viewers vs dpr", variant, dpr))
        print(line("segment views, viewers off vs dpr", off, dpr))
        tested.append((variant, off))
    if len(tested) >= 2:
        print(pooled(tested))


if __name__ == "__main__":
    main()
