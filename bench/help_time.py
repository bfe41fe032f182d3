"""Wall time of every command-line entry point's ``--help`` on a cold start.

Each command runs in a fresh process from the source tree (``PYTHONPATH`` set to it). "cold": the first run after
the page cache is dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``) when this process may do that, else the
first run of the command; "warm": the median of ``--repeats`` runs right after. ``lines``: what ``--help`` prints;
``heavy``: the heavy modules the process had imported when it exited (none expected but transformers' argument
parser for the dataclass drivers, and the Trainer's stack for ``train --help_all``). The first line records the
machine load (``uptime``): timings on a shared machine are only comparable within one run.

    python bench/help_time.py > bench/help_time.log
    git archive <old commit> multiview_plugin recipes | tar -x -C OLD && \
        MULTIVIEW_HELP_CACHE=0 python bench/help_time.py --root OLD >> bench/help_time.log   # the code before

A command that fails (``--help_all`` before it existed) is reported with its exit status.
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

ROOT = Path(__file__).resolve().parents[1]
MODULES = [f"multiview_plugin.driver.{d}" for d in ("train", "encode", "index", "search", "evaluate", "analyze",
                                                    "mine_negatives", "generate_queries")]
COMMANDS = [[sys.executable, "-m", m, "--help"] for m in MODULES] + [
    [sys.executable, "-m", "multiview_plugin.quickstart", "--help"],
    [sys.executable, "-m", "multiview_plugin.data.squad", "--help"],
    [sys.executable, "recipes/run.py", "--help"],
    [sys.executable, "-m", "multiview_plugin.driver.train", "--help_all"],
]
HEAVY = ("torch", "faiss", "datasets", "scipy", "transformers", "transformers.training_args")
PROBE = ("import atexit, sys\n"
         f"atexit.register(lambda: print('HEAVY', *[m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr))\n")


def drop_caches() -> bool:
    """Drop the page cache (root on Linux only); False where not permitted."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run(command: list[str], root: Path) -> tuple[float, str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    # runpy under -c runs the module as -m does; the probe prints the heavy modules imported, at exit
    argv = command[1:]
    if argv[0] == "-m":
        code = PROBE + f"import runpy; sys.argv = [{argv[1]!r}, *{argv[2:]!r}]; runpy.run_module({argv[1]!r}, " \
                       "run_name='__main__', alter_sys=True)"
    else:
        code = PROBE + f"import runpy; sys.argv = {argv!r}; runpy.run_path({argv[0]!r}, run_name='__main__')"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    heavy = next((line.split()[1:] for line in done.stderr.splitlines() if line.startswith("HEAVY")), [])
    return seconds, done.stdout, heavy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--root", type=Path, default=ROOT, help="the source tree to time (default: this one)")
    args = p.parse_args()
    root = args.root.resolve()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"root": "this tree" if root == ROOT else root.name, "uptime_at_start": load,
                      "cpus": os.cpu_count(), "python": sys.version.split()[0]}), flush=True)
    for command in COMMANDS:
        shown = " ".join(["python", *command[1:]])
        dropped = drop_caches()
        try:
            cold, text, heavy = run(command, root)
            warm = statistics.median(run(command, root)[0] for _ in range(args.repeats))
        except RuntimeError as err:
            print(json.dumps({"command": shown, "error": str(err)}), flush=True)
            continue
        print(json.dumps({"command": shown, "cold_s": round(cold, 2), "warm_s": round(warm, 2),
                          "page_cache_dropped": dropped, "lines": len(text.splitlines()), "heavy": heavy}),
              flush=True)
    print(json.dumps({"uptime_at_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}))


if __name__ == "__main__":
    main()
