"""Run records (``results/<data>/<name>.json``): reading them, the settings of the command that made each one, rows
grouped by system and setting over seeds, and each row's paired test against dpr of the same setting and seed.

A record is ``{"name", "command", ["protocol",] "recorded", "rows": [...]}``; its rows are the quickstart's
``results.json`` rows. A run's settings (backbone, steps, batch, learning rate, passage length, dev selection,
train flags) are read from the recorded command with the quickstart's own argument parser, so a table row cannot
claim settings its run did not use (a peer run made by another script: from its record's ``protocol``, the
quickstart command it reproduces). When two runs report the same system on the same data, the later recorded one
wins (e.g. dpr rerun beside dcsr).
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from functools import lru_cache
from pathlib import Path

from multiview_plugin.quickstart.options import build_parser, train_seed
from multiview_plugin.records import dumps_rows

# The repository the records live in: the checkout this tool is part of (tools/reporting/ in it).
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"

SIGNIFICANCE_ALPHA = 0.05
# the quickstart settings that make two runs comparable (with the data, the train flags other than --seed and the
# source data set of a transfer run, and whether it ran on a GPU); a setting is (data, *these, device, flags, source)
SEED_FLAG_KEYS = ("steps", "dev_groups", "dev_eval_steps", "dev_patience", "passage_max_len", "batch_size",
                  "learning_rate", "backbone", "dce_max_queries")

def quickstart_settings(command: str) -> argparse.Namespace:
    """The settings of a quickstart command line, parsed by the quickstart's own parser."""
    argv = shlex.split(command)
    if "multiview_plugin.quickstart" not in argv:
        raise SystemExit(f"not a quickstart command: {command!r}")
    return build_parser().parse_args(argv[argv.index("multiview_plugin.quickstart") + 1:])


def record_settings(record: dict) -> argparse.Namespace:
    """A record's settings: those of its quickstart command, or, for a peer system run by another script, of the
    quickstart command whose protocol it reproduces (the record's ``protocol``)."""
    return quickstart_settings(record.get("protocol", record["command"]))


def add(run_dir: Path, name: str, command: str, systems: list[str] | None, protocol: str | None = None) -> Path:
    """Record a finished run (``run_dir/results.json``) as ``results/<data>/<name>.json`` with its command."""
    rows = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    settings = quickstart_settings(protocol or command)
    if systems:
        rows = [r for r in rows if r["system"] in systems]
    out = RESULTS / settings.data / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "command": command, **({"protocol": protocol} if protocol else {}),
              "recorded": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    out.write_text(dumps_rows(record) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} ({len(rows)} rows)")
    return out


def load_record(name: str) -> dict:
    """The record named ``name`` (``results/<data>/<name>.json``, any data set)."""
    found = sorted(RESULTS.glob(f"*/{name}.json"))
    if not found:
        raise KeyError(f"no record {name!r} under {RESULTS}")
    return json.loads(found[0].read_text(encoding="utf-8"))


def is_transfer(record: dict) -> bool:
    """A zero-shot transfer run: models trained on another data set (quickstart ``--models_from``)."""
    return bool(record_settings(record).models_from)


def records(data: str, selected: bool, transfer: bool = False) -> list[dict]:
    """The run records of ``data``, oldest first: those with dev-split model selection, or those without; in-domain
    runs, or (``transfer``) the zero-shot transfer runs of models trained on another data set."""
    found = [json.loads(p.read_text(encoding="utf-8")) for p in (RESULTS / data).glob("*.json")]
    settings = [(r, record_settings(r)) for r in found]  # one parse of each command
    return sorted([r for r, s in settings if bool(s.dev_groups) == selected and bool(s.models_from) == transfer],
                  key=lambda r: r["recorded"])


def run_config(record: dict, row: dict) -> tuple[str, tuple, int]:
    """``(system, setting, seed)`` of a record row: the system without the run's --tag, the settings that make two
    runs comparable (steps, dev selection, lengths, batch, lr, train flags other than --seed) and the seed."""
    s = record_settings(record)
    system = row["system"].replace(s.tag, "", 1) if s.tag else row["system"]
    argv = shlex.split(s.train_flags)
    flags = []
    for i, a in enumerate(argv):
        if a == "--seed" or a.startswith("--seed=") or (i and argv[i - 1] == "--seed"):
            continue
        flags.append(a)
    source = transfer_source(record)
    setting = (s.data, *(getattr(s, k) for k in SEED_FLAG_KEYS), device_class(row), " ".join(flags), source)
    return system, setting, row.get("seed", train_seed(s.train_flags))


def device_class(row: dict) -> str:
    """"gpu" for a row trained on a CUDA device (rows record ``device``), else "cpu": runs on other hardware are
    another setting (other kernels, other numbers), never pooled as seeds or tested against each other."""
    return "cpu" if str(row.get("device", "cpu")) == "cpu" else "gpu"


def transfer_source(record: dict) -> str:
    """The data set a transfer run's models were trained on ('' for in-domain runs), from its rows' transfer_from."""
    if not is_transfer(record):
        return ""
    froms = [str(r.get("transfer_from", "")) for r in record["rows"]]
    return next(("squad" if "squad" in f.lower() else "scifact" if "scifact" in f.lower() else "another data set"
                 for f in froms if f), "another data set")


def paired_p(row: dict, baseline: dict | None) -> dict:
    """The row's paired test against dpr: its own (same run), else computed here from the per-question outcomes
    of dpr's row with the same setting and seed in another record; {} when neither has them."""
    if "p_value" in row:
        return {k: row[k] for k in ("p_value", "p_test", "p_delta") if k in row}
    if baseline is None or row is baseline or "per_query" not in row or "per_query" not in baseline:
        return {}
    a, b = row["per_query"], baseline["per_query"]
    if a["outcome"] != b["outcome"] or len(a["ranks"]) != len(b["ranks"]):
        return {}
    from multiview_plugin.evaluation.significance import compare_ranks

    return compare_ranks(a["ranks"], b["ranks"], 1)


@lru_cache(maxsize=1)
def method_flags() -> frozenset[str]:
    """Every registered method's own flags (``--mvr_num_views``, ``--dcsr_sentence_pooling``, …), from each
    encoder's typed options (:class:`multiview_plugin.modeling.options.MethodOptions`): flags that never apply to
    dpr."""
    from multiview_plugin.registry import ENCODERS, get_encoder_class

    return frozenset(f"--{flag}" for name in ENCODERS.names()
                     for flag in get_encoder_class(name).options_class.flags())


def baseline_row(groups: dict, setting: tuple, seed: int) -> dict | None:
    """dpr's row to test a run against: dpr with the same budget, seed and train flags; else with the run's flags
    minus the other methods' own options (``--mvr_*`` … never apply to dpr); else plain dpr of that budget and seed
    (an ablation of a shared flag, e.g. another temperature, is tested against the baseline as users train it)."""
    for candidate in baseline_settings(setting):
        row = groups.get(("dpr", candidate), {}).get(seed)
        if row is not None and "per_query" in row:
            return row
    return groups.get(("dpr", setting), {}).get(seed)


def baseline_settings(setting: tuple) -> list[tuple]:
    """The dpr settings a run is compared with, in order: its own; its train flags minus the methods' own
    options (:func:`method_flags`); no train flags."""
    flags = shlex.split(setting[-2])
    own = method_flags()
    kept, skip = [], False
    for a in flags:
        if skip:
            skip = False
            continue
        if a.split("=", 1)[0] in own:
            skip = "=" not in a
            continue
        kept.append(a)
    return [setting, (*setting[:-2], " ".join(kept), setting[-1]), (*setting[:-2], "", setting[-1])]


def seed_groups(data: str) -> list[dict]:
    """Rows of the same system and setting over seeds (the latest record per seed), each with its p-values and
    (``baselines``) the dpr row each seed is tested against."""
    groups: dict[tuple, dict[int, dict]] = {}
    for selected in (True, False):
        for record in records(data, selected) + records(data, selected, transfer=True):
            for row in record["rows"]:
                system, setting, seed = run_config(record, row)
                groups.setdefault((system, setting), {})[seed] = {**row, "_record": record["name"]}
    out = []
    for (system, setting), by_seed in groups.items():
        dpr = {seed: baseline_row(groups, setting, seed) for seed in sorted(by_seed)}
        tests = {seed: paired_p(row, dpr[seed]) for seed, row in by_seed.items()} if system != "dpr" else {}
        out.append({"system": system, "setting": setting, "seeds": dict(sorted(by_seed.items())),
                    "tests": dict(sorted(tests.items())),  # both in seed order: tables list them side by side
                    "baselines": dpr if system != "dpr" else {}})
    return out


def tested_win(g: dict) -> tuple[dict, bool]:
    """A seed group's seeds that carry a paired test against dpr, and whether it is a significant win: p below
    SIGNIFICANCE_ALPHA and a positive Δ for every tested seed."""
    tested = {seed: t for seed, t in g["tests"].items() if t.get("p_value") is not None}
    return tested, bool(tested) and all(t["p_value"] < SIGNIFICANCE_ALPHA and t["p_delta"] > 0
                                        for t in tested.values())


def top1_hits(row: dict) -> float | None:
    """A row's top-1 hits in % from its per-question outcomes (the quantity its paired test compares), None
    without them."""
    pq = row.get("per_query")
    if not pq or not pq.get("ranks"):
        return None
    return 100.0 * sum(r == 0 for r in pq["ranks"]) / len(pq["ranks"])
