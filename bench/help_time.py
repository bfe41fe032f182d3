"""Wall time of ``--help`` of the drivers, old source tree against new, measured in one run.

Each command runs ``--repeats`` times per tree, alternating the trees (so load on a shared machine hits both
alike), in a fresh process started in the tree (and ``PYTHONPATH`` set to it); the median is reported with the
ratio old/new, and the number of lines ``--help`` prints.

    mkdir -p /tmp/old && git archive <old commit> multiview_plugin | tar -x -C /tmp/old
    python bench/help_time.py --old /tmp/old --new . > bench/help_time.log
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODULES = ("multiview_plugin.driver.encode", "multiview_plugin.driver.train")


def run(tree: Path, module: str) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env,
                          cwd=tree, check=True)  # -m puts the working folder first on sys.path
    return time.perf_counter() - start, len(done.stdout.splitlines())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="source tree before (its multiview_plugin/ is imported)")
    p.add_argument("--new", type=Path, required=True, help="source tree after")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for module in MODULES:
        times: dict[str, list[float]] = {"old": [], "new": []}
        lines = {}
        for _ in range(args.repeats):
            for name, tree in (("old", args.old), ("new", args.new)):
                seconds, lines[name] = run(tree, module)
                times[name].append(seconds)
        old, new = statistics.median(times["old"]), statistics.median(times["new"])
        print(json.dumps({"command": f"python -m {module} --help", "old_s": round(old, 2), "new_s": round(new, 2),
                          "old_over_new": round(old / new, 1), "old_lines": lines["old"], "new_lines": lines["new"],
                          "runs_s": {k: [round(t, 2) for t in v] for k, v in times.items()}}), flush=True)


if __name__ == "__main__":
    main()
