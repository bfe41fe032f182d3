"""Wall time of ``--help`` of the drivers, old source tree against new, measured in one run.

Each command runs ``--repeats`` times per tree, alternating the trees (so load on a shared machine hits both
alike), in a fresh process started in the tree (and ``PYTHONPATH`` set to it); the median is reported with the
ratio old/new, and the number of lines ``--help`` prints. The new tree runs twice per repeat: "cold" with an empty
``--help`` text cache (``MULTIVIEW_HELP_CACHE``, a new folder each repeat: what a first call costs) and "warm" right
after it, the text cached (every later call); ``new_s`` / ``old_over_new`` are the warm ones. The old tree gets an
empty cache folder too (a tree without the cache ignores it). ``same_text``: the old, cold and warm texts agree.

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
import tempfile
import time
from pathlib import Path

MODULES = ("multiview_plugin.driver.encode", "multiview_plugin.driver.train")


def run(tree: Path, module: str, cache: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "HF_HUB_OFFLINE": "1", "MULTIVIEW_HELP_CACHE": cache,
           "COLUMNS": "120"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env,
                          cwd=tree, check=True)  # -m puts the working folder first on sys.path
    return time.perf_counter() - start, done.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="source tree before (its multiview_plugin/ is imported)")
    p.add_argument("--new", type=Path, required=True, help="source tree after")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for module in MODULES:
        times: dict[str, list[float]] = {"old": [], "new_cold": [], "new_warm": []}
        texts: dict[str, str] = {}
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as old_cache, tempfile.TemporaryDirectory() as new_cache:
                for name, tree, cache in (("old", args.old, old_cache), ("new_cold", args.new, new_cache),
                                          ("new_warm", args.new, new_cache)):
                    seconds, texts[name] = run(tree, module, cache)
                    times[name].append(seconds)
        old, cold, warm = (statistics.median(times[k]) for k in ("old", "new_cold", "new_warm"))
        print(json.dumps({"command": f"python -m {module} --help", "old_s": round(old, 2), "new_s": round(warm, 2),
                          "old_over_new": round(old / warm, 1), "new_cold_s": round(cold, 2),
                          "old_over_new_cold": round(old / cold, 1),
                          "old_lines": len(texts["old"].splitlines()), "new_lines": len(texts["new_warm"].splitlines()),
                          "same_text": texts["old"] == texts["new_cold"] == texts["new_warm"],
                          "runs_s": {k: [round(t, 2) for t in v] for k, v in times.items()}}), flush=True)

if __name__ == "__main__":
    main()
