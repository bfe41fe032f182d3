"""The measured-results tables of docs/results.md and the README's quickstart table, generated from committed
run records.

    # record a finished run (its results.json) under results/<data>/<name>.json, with the command that made it
    python bench/results.py add runs/scifact --name scifact-all \
        --command "python -m multiview_plugin.quickstart --data scifact --beir_dir $DATA/beir/scifact ..."
    # rewrite docs/results.md's tables (between the results markers) from everything in results/, and the
    # README's quickstart table (between the quickstart markers) from results/default/quickstart-default.json
    python bench/results.py render
    # the same, without writing: exit 1 and print one line per difference when a table is not what the records give
    python bench/results.py check
    # a peer system trained by another script (bench/colbert_peer.py): its command, and the quickstart command
    # whose protocol (data, budget, dev selection) it reproduces, which gives the row its settings
    python bench/results.py add RUN_DIR --name squad-sel-colbert-pylate --command "python bench/colbert_peer.py ..." \
        --protocol "python -m multiview_plugin.quickstart --data squad ... --systems dpr"

A run's settings (backbone, steps, batch, learning rate, passage length) are read from the recorded command
with the quickstart's own argument parser, so a table row cannot claim settings its run did not use (a peer run
made by another script: from its record's ``protocol``, the quickstart command it reproduces). When two
runs report the same system on the same data, the later recorded one wins (e.g. DPR, rerun beside DCSR).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
START, END = "<!-- results:start -->", "<!-- results:end -->"
QS_START, QS_END = "<!-- quickstart:start -->", "<!-- quickstart:end -->"
TR_START, TR_END = "<!-- transfer:start -->", "<!-- transfer:end -->"
HL_START, HL_END = "<!-- headline:start -->", "<!-- headline:end -->"
RESULTS_PAGE = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
QUICKSTART_RECORD = RESULTS / "default" / "quickstart-default.json"
DATASETS = {
    "squad": ("SQuAD-dev multi-view protocol", "3,335 held-out questions (articles 32–47) against all 2,067 "
              "paragraphs; train: 7,235 questions of articles 0–31, 1 BM25 negative each",
              ["answer_Top1", "answer_Top5", "answer_Top20", "R@1", "R@5", "R@20", "MRR@10"]),
    "scifact": ("SciFact (BEIR)", "200 dev queries carved (seed 42) from qrels/train.tsv, against all 5,183 "
                "abstracts; train: the other 609 judged queries, 1 BM25 negative each",
                ["nDCG@10", "R@1", "R@5", "R@20", "MRR@10"]),
}
HEADERS = {"answer_Top1": "top-1", "answer_Top5": "top-5", "answer_Top20": "top-20"}
HYBRID_BASES = ("dpr", "dcsr-mean", "minilm-zero-shot")
SYSTEM_NAMES = {
    "bm25": "BM25 (bm25s)", "minilm-zero-shot": "MiniLM zero-shot", "dpr": "dpr (mean pooling)",
    "dpr-cls": "dpr ([CLS])", "mvr": "mvr (k = 8, shared position 0)",
    "mvr-distinct": "mvr (k = 8, distinct positions)",
    "mlr-sc": "mlr (self-contrastive, layers 6,5)", "mlr-max": "mlr (max, layers 6,5)", "mebert": "mebert (k = 8)",
    "dcsr": "dcsr (HasAns)", "dcsr (max)": "dcsr (max aggregation)", "dce": "dce (sentence pseudo-queries)",
    "mvr-residual": "mvr-residual (k = 8, gated read-only viewers)",
    "mlr-sc-mean": "mlr-sc-mean (self-contrastive, layers 6,5 mean-pooled)",
    "mlr-max-mean": "mlr-max-mean (max, layers 6,5 mean-pooled)",
    "mlr-mix-mean": "mlr-mix-mean (scalar mix, layers 6,5 mean-pooled)",
    "dcsr-mean-zero-shot": "dcsr-mean zero-shot (untrained, HasAns)",
    "dcsr-mean-zero-shot (max)": "dcsr-mean zero-shot (untrained, max)",
    "dcsr-independent-zero-shot": "dcsr-independent zero-shot (sentences alone, HasAns)",
    "dcsr-independent-zero-shot (max)": "dcsr-independent zero-shot (sentences alone, max)",
    "dcsr-mean": "dcsr-mean (span-mean sentences, HasAns)", "dcsr-mean (max)": "dcsr-mean (span-mean sentences, max)",
    "dcsr-mean-passage": "dcsr-mean-passage (span-mean sentences, passage-level training, HasAns)",
    "dcsr-mean-passage (max)": "dcsr-mean-passage (span-mean sentences, passage-level training, max)",
    "dcsr-mean-passage-pv": "dcsr-mean-passage-pv (sentences + passage view, passage-level training, HasAns)",
    "dcsr-mean-passage-pv (max)": "dcsr-mean-passage-pv (sentences + passage view, passage-level training, max)",
    "dcsr-independent": "dcsr-independent (sentences alone, HasAns)",
    "dcsr-independent (max)": "dcsr-independent (sentences alone, max)",
    # dense + BM25 (quickstart --hybrid): score interpolation with alpha chosen on dev, and reciprocal rank fusion
    **{f"{m}+bm25": f"{m} + BM25 (score interpolation)" for m in HYBRID_BASES},
    **{f"{m}+bm25 (rrf)": f"{m} + BM25 (reciprocal rank fusion)" for m in HYBRID_BASES},
    # the peer: PyLate's ColBERT on the same protocol (bench/colbert_peer.py)
    "colbert-pylate": "colbert-pylate (PyLate ColBERT, 128-dim token vectors)",
}
# Vector dims of the quickstart's indexes per backbone: every system indexes the backbone's hidden states (no
# projection) in a Faiss Flat float32 index, so a row's index holds vectors x dim x 4 bytes. Rows that record
# ``index_bytes`` themselves (colbert-pylate: its 128-dim token vectors) show that.
INDEX_DIMS = {"all-MiniLM-L6-v2": 384}
PLOTS = RESULTS / "plots"


def quickstart_settings(command: str) -> argparse.Namespace:
    from multiview_plugin.quickstart.__main__ import build_parser

    argv = shlex.split(command)
    if "multiview_plugin.quickstart" not in argv:
        raise SystemExit(f"not a quickstart command: {command!r}")
    return build_parser().parse_args(argv[argv.index("multiview_plugin.quickstart") + 1:])


def record_settings(record: dict) -> argparse.Namespace:
    """A record's settings: those of its quickstart command, or, for a peer system run by another script, of the
    quickstart command whose protocol it reproduces (the record's ``protocol``)."""
    return quickstart_settings(record.get("protocol", record["command"]))


def add(run_dir: Path, name: str, command: str, systems: list[str] | None, protocol: str | None = None) -> Path:
    rows = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    settings = quickstart_settings(protocol or command)
    if systems:
        rows = [r for r in rows if r["system"] in systems]
    out = RESULTS / settings.data / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "command": command, **({"protocol": protocol} if protocol else {}),
              "recorded": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    from multiview_plugin.quickstart.__main__ import dumps_rows

    out.write_text(dumps_rows(record) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)} ({len(rows)} rows)")
    return out


def cell(value) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


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


SELECTED_NOTE = ("Model selection: articles {groups} are carved out of the training articles as a dev split "
                 "(their questions and paragraphs leave training); every system is checked on it every "
                 "{every} (step 0 included) and the best checkpoint is the one evaluated. Curves: "
                 "![training curves]({plot})")


def index_mb(row: dict, backbone: str) -> float | None:
    """Megabytes of the vectors the row's index searches: recorded ``index_bytes``, else vectors x dim x 4
    (float32) for the quickstart's backbones; None without vectors (BM25)."""
    if "index_bytes" in row:
        return row["index_bytes"] / 1e6
    if row.get("vectors") and backbone in INDEX_DIMS:
        return row["vectors"] * INDEX_DIMS[backbone] * 4 / 1e6
    return None


def table(data: str, selected: bool = False, base: Path = RESULTS_PAGE.parent, write_plot: bool = True,
          transfer: bool = False) -> str:
    title, protocol, metrics = DATASETS[data]
    rows: dict[str, dict] = {}
    chosen = records(data, selected, transfer)
    if transfer:
        sources = sorted({transfer_source(r) for r in chosen})
        title = (f"Zero-shot transfer to {title}: models trained on "
                 f"{', '.join(DATASETS.get(d, (d,))[0] for d in sources)}, evaluated unchanged")
        protocol = (protocol.split("; train:")[0] + f"; no {data} training: each model is the dev-selected "
                    "checkpoint of the run named by the command's `--models_from` (steps and batch are its training)")
    for record in chosen:
        s = record_settings(record)
        for r in record["rows"]:
            wall = r.get("wall_s", r.get("train_s", 0.0) + r.get("encode_s", 0.0))
            rows[r["system"]] = {**r, "_wall": wall, "_record": record["name"],
                                 "_backbone": r.get("backbone", Path(s.backbone).name),
                                 "_batch": s.batch_size if r.get("steps") else "–", "_lr": s.learning_rate,
                                 "_len": s.passage_max_len}
    order = list(SYSTEM_NAMES)
    ranked = sorted(rows.values(), key=lambda r: order.index(r["system"]) if r["system"] in order else len(order))
    head = ["system", "backbone", "steps", *(["best step"] if selected else []), "batch", "wall s", "vectors/doc",
            "index MB", *(HEADERS.get(m, m) for m in metrics), "run"]
    if selected and data == "squad" and chosen:  # the dev articles leave training: say how many questions remain
        trained = max((r.get("train_queries", 0) for rec in chosen for r in rec["rows"]), default=0)
        groups = record_settings(chosen[-1]).dev_groups
        protocol = protocol.replace("train: 7,235 questions of articles 0–31",
                                    f"train: {trained:,} questions of articles 0–31 minus the dev articles {groups}")
    heading = f"**{title}**{' — dev-selected checkpoints' if selected else ''} — {protocol}; metrics in %."
    lines = [heading, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in ranked:
        vectors = (r["views_per_doc"] if "views_per_doc" in r else r.get("views")) or "–"  # older runs: views
        best = [str(r.get("best_step", "–"))] if selected else []
        lines.append("| " + " | ".join([SYSTEM_NAMES.get(r["system"], r["system"]), r["_backbone"], str(r["steps"]),
                                        *best, str(r["_batch"]), f"{r['_wall']:.0f}", cell(vectors),
                                        cell(index_mb(r, r["_backbone"])),
                                        *(cell(r.get(m)) for m in metrics), f"`{r['_record']}`"]) + " |")
    if selected and chosen:
        s = record_settings(chosen[-1])
        plot = plot_curves(data, [r for r in ranked if r.get("curves", {}).get("loss")], write=write_plot)
        settings = [record_settings(r) for r in chosen]
        schedules = sorted({(c.steps, c.dev_eval_steps) for c in settings if c.dev_groups})
        every = "; ".join(f"{e} steps in the {n}-step runs" for n, e in schedules)
        lines += ["", SELECTED_NOTE.format(groups=s.dev_groups, every=every,
                                              plot=Path(os.path.relpath(plot, base)).as_posix())]
    lines += ["", "Runs (`results/" + data + "/<run>.json`):", ""]
    lines += [f"- `{r['name']}`: `{r['command']}`{ran_on(r)}" for r in sorted(chosen, key=lambda r: r["name"])]
    return "\n".join(lines)


def ran_on(record: dict) -> str:
    """The suffix " (on <GPU>)" for a record whose rows ran on a CUDA device (rows record `device`; older: CPU)."""
    gpus = sorted({str(r["device"]) for r in record["rows"] if r.get("device", "cpu") != "cpu"})
    return f" (on {', '.join(gpus)})" if gpus else ""


SIGNIFICANCE_ALPHA = 0.05
SEED_FLAG_KEYS = ("steps", "dev_groups", "dev_eval_steps", "dev_patience", "passage_max_len", "batch_size",
                  "learning_rate", "backbone", "dce_max_queries")


def run_config(record: dict, row: dict) -> tuple[str, tuple, int]:
    """``(system, setting, seed)`` of a record row: the system without the run's --tag, the settings that make two
    runs comparable (steps, dev selection, lengths, batch, lr, train flags other than --seed) and the seed."""
    from multiview_plugin.quickstart.__main__ import train_seed

    s = record_settings(record)
    system = row["system"].replace(s.tag, "", 1) if s.tag else row["system"]
    argv = shlex.split(s.train_flags)
    flags = []
    for i, a in enumerate(argv):
        if a == "--seed" or a.startswith("--seed=") or (i and argv[i - 1] == "--seed"):
            continue
        flags.append(a)
    source = transfer_source(record)
    setting = (s.data, *(getattr(s, k) for k in SEED_FLAG_KEYS), " ".join(flags), source)
    return system, setting, row.get("seed", train_seed(s.train_flags))


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


METHOD_FLAG_PREFIXES = ("--mvr_", "--dcsr_", "--mlr_", "--dce_", "--mebert_")


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
    """The dpr settings a run is compared with, in order: its own; its train flags minus the other methods' own
    options; no train flags."""
    flags = shlex.split(setting[-2])
    kept, skip = [], False
    for a in flags:
        if skip:
            skip = False
            continue
        if a.startswith(METHOD_FLAG_PREFIXES):
            skip = "=" not in a
            continue
        kept.append(a)
    return [setting, (*setting[:-2], " ".join(kept), setting[-1]), (*setting[:-2], "", setting[-1])]


def seed_groups(data: str) -> list[dict]:
    """Rows of the same system and setting over seeds (the latest record per seed), each with its p-values."""
    groups: dict[tuple, dict[int, dict]] = {}
    for selected in (True, False):
        for record in records(data, selected) + records(data, selected, transfer=True):
            for row in record["rows"]:
                system, setting, seed = run_config(record, row)
                groups.setdefault((system, setting), {})[seed] = {**row, "_record": record["name"]}
    out = []
    for (system, setting), by_seed in groups.items():
        dpr = {seed: baseline_row(groups, setting, seed) for seed in by_seed}
        tests = {seed: paired_p(row, dpr[seed]) for seed, row in by_seed.items()} if system != "dpr" else {}
        out.append({"system": system, "setting": setting, "seeds": dict(sorted(by_seed.items())),
                    "tests": dict(sorted(tests.items()))})  # both in seed order: tables list them side by side
    return out


def seed_summary(g: dict, metric: str) -> str:
    """A seed group's ``metric`` as "mean ± sample sd" over its seeds ("mean" for one seed, "–" for none)."""
    values = [r[metric] for r in g["seeds"].values() if r.get(metric) is not None]
    if not values:
        return "–"
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else None
    return f"{mean:.1f}" + (f" ± {sd:.1f}" if sd is not None else "")


def tested_win(g: dict) -> tuple[dict, bool]:
    """A seed group's seeds that carry a paired test against dpr, and whether it is a significant win: p below
    SIGNIFICANCE_ALPHA and a positive Δ for every tested seed."""
    tested = {seed: t for seed, t in g["tests"].items() if t.get("p_value") is not None}
    return tested, bool(tested) and all(t["p_value"] < SIGNIFICANCE_ALPHA and t["p_delta"] > 0
                                        for t in tested.values())


def tested_cells(tested: dict) -> tuple[str, str]:
    """The per-seed Δ and p cells of :func:`tested_win`'s tested seeds, in seed order ("" where none is tested)."""
    return (", ".join(f"{t['p_delta']:+.1f}" for t in tested.values()),
            ", ".join(f"{t['p_value']:.2g}" for t in tested.values()))


def significance_table(data: str) -> str | None:
    """Seeds and significance: every system run with 2+ seeds, or carrying a paired test against dpr."""
    title, _, metrics = DATASETS[data]
    metric = metrics[0]
    shown = [g for g in seed_groups(data)
             if len(g["seeds"]) >= 2 or any(t.get("p_value") is not None for t in g["tests"].values())]
    if not shown:
        return None
    order = list(SYSTEM_NAMES)

    def key(g: dict) -> tuple:
        base = g["system"].split("+", 1)[0].split(" (", 1)[0]
        return (g["setting"][-1], g["setting"][1], order.index(base) if base in order else len(order), g["system"])

    head = ["system", "steps", "dev-selected", "seeds", f"{HEADERS.get(metric, metric)} mean ± sd",
            "per seed", "Δ top-1 vs dpr (per seed)", "p vs dpr (per seed)", "significant win", "runs"]
    lines = [f"**{title}: seeds and paired significance** — {HEADERS.get(metric, metric)} in %, mean ± sample "
             "standard deviation over seeds; p: two-sided paired randomization test (10,000 seeded sign flips, "
             "exact for few differences) of the per-question top-1 hits against dpr of the same budget and "
             "seed (and train flags, where such a dpr run exists: method-only flags such as --mvr_* never "
             "apply to dpr);"
             f" a significant win has p < {SIGNIFICANCE_ALPHA} and a positive Δ for every tested seed (**bold**).",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in sorted(shown, key=key):
        tested, win = tested_win(g)
        summary = seed_summary(g, metric)
        name = SYSTEM_NAMES.get(g["system"], g["system"])
        if g["setting"][-2]:  # a variant: its train flags
            name += f", `{g['setting'][-2]}`"
        if g["setting"][-1]:
            name += f", trained on {DATASETS.get(g['setting'][-1], (g['setting'][-1],))[0]} (zero-shot transfer)"
        lines.append("| " + " | ".join([
            f"**{name}**" if win else name, str(g["setting"][1]), "yes" if g["setting"][2] else "no",
            ", ".join(str(s) for s in g["seeds"]) + f" (n = {len(g['seeds'])})",
            f"**{summary}**" if win else summary,
            ", ".join(cell(r.get(metric)) for r in g["seeds"].values()),
            *(c or "–" for c in tested_cells(tested)),
            "yes" if win else ("no" if tested else "–"),
            ", ".join(f"`{r['_record']}`" for r in g["seeds"].values())]) + " |")
    return "\n".join(lines)


def view_ablation_table(data: str = "squad", family: str = "mvr") -> str | None:
    """Every recorded run of ``family`` (its paper form and each variant, by train flags, budget and seed) with
    top-1, its Δ and paired test against dpr of the same setting and seed, and the view diagnostics (view
    perplexity: how many views win queries, of k; Local Variation: how far a passage's view scores spread)."""
    metric = DATASETS[data][2][0]
    shown = [g for g in seed_groups(data) if g["system"].split(" (", 1)[0].split("+", 1)[0].startswith(family)
             and not g["setting"][-1]]
    if not shown:
        return None
    head = ["system", "train flags", "steps", "dev-selected", "seed", HEADERS.get(metric, metric), "Δ vs dpr",
            "p vs dpr", "view PPL", "LV", "best step", "run"]
    lines = [f"**{DATASETS[data][0]}: {family} ablations** — every recorded {family} run; Δ and p against dpr of the "
             "same budget and seed (and train flags where such a dpr run exists; paired randomization test on top-1 "
             "hits; – where a record has no per-question "
             "ranks); view PPL: the perplexity of which view wins each query (1 = one view wins all, k = even); LV: "
             "Local Variation of the view scores (MVR §5.2).", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for g in sorted(shown, key=lambda g: (g["system"], g["setting"][1], g["setting"][-2])):
        for seed, r in g["seeds"].items():
            t = g["tests"].get(seed, {})
            lines.append("| " + " | ".join([
                SYSTEM_NAMES.get(g["system"], g["system"]), f"`{g['setting'][-2]}`" if g["setting"][-2] else "–",
                str(g["setting"][1]), "yes" if g["setting"][2] else "no", str(seed), cell(r.get(metric)),
                f"{t['p_delta']:+.1f}" if t.get("p_delta") is not None else "–",
                f"{t['p_value']:.2g}" if t.get("p_value") is not None else "–",
                f"{r['PPL']:.2f}" if r.get("PPL") is not None else "–",
                f"{r['LV']:.2g}" if r.get("LV") is not None else "–", str(r.get("best_step", "–")),
                f"`{r['_record']}`"]) + " |")
    return "\n".join(lines)


def plot_curves(data: str, rows: list[dict], write: bool = True) -> Path:
    """Training loss and dev metric against steps, one line per system, as ``results/plots/<data>-curves.png``
    (``write=False``: only the path)."""
    out = PLOTS / f"{data}-curves.png"
    if not write:
        return out
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, dev_ax, zoom_ax) = plt.subplots(1, 3, figsize=(16, 4.6))
    top = []
    seen = set()
    models = [r for r in rows if not r["system"].endswith("(max)")]
    colours = plt.cm.tab20.colors  # 20 distinct colours: the default cycle repeats after 10 systems
    for r in models:
        if r["system"] in seen:
            continue  # one curve per trained model
        style = dict(color=colours[len(seen) % len(colours)], linestyle=("-", "--", ":")[len(seen) // 20 % 3])
        seen.add(r["system"])
        curves = r["curves"]
        steps, losses = zip(*curves["loss"])
        loss_ax.plot(steps, losses, label=r["system"], **style)
        if curves.get("dev"):
            dev_steps, values = zip(*curves["dev"])
            for ax in (dev_ax, zoom_ax):
                ax.plot(dev_steps, [100 * v for v in values], marker="o", markersize=3, **style)
                ax.set_ylabel(f"dev {curves.get('dev_metric', '')} (%)")
            top.append(100 * max(values))
    loss_ax.set(xlabel="step", ylabel="training loss", title="training loss")
    dev_ax.set(xlabel="step", title="dev metric (model selection)")
    zoom_ax.set(xlabel="step", title="dev metric, top 8 points")
    if top:  # many systems end within a few points of each other: the zoom separates them
        zoom_ax.set_ylim(max(top) - 8, max(top) + 0.5)
    for ax in (loss_ax, dev_ax, zoom_ax):
        ax.grid(alpha=0.3)
    # one legend for the three panels, outside them, so no curve hides behind it
    fig.legend(*loss_ax.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    PLOTS.mkdir(parents=True, exist_ok=True)
    # no version stamp: the same rows, the same bytes
    fig.savefig(out, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return out


QUICKSTART_COLUMNS = [("system", "system"), ("steps", "steps"), ("views_per_doc", "views/doc"), ("MRR@10", "MRR@10"),
                      ("R@1", "R@1"), ("R@5", "R@5"), ("answer_Top1", "answer top-1"), ("PPL", "view PPL"),
                      ("LV", "LV")]
QUICKSTART_NAMES = {"dcsr-mean": "dcsr-mean (HasAns)"}


def quickstart_table(record_path: Path = QUICKSTART_RECORD) -> str:
    """The README's quickstart table, from the quickstart's committed record."""
    record = json.loads(record_path.read_text(encoding="utf-8"))

    def fmt(key: str, value) -> str:
        if value is None or value == "":
            return ""
        if key == "system":
            return QUICKSTART_NAMES.get(value, value)
        if key == "LV":
            return f"{value:.2g}"
        if key == "PPL":
            return f"{value:.2f}"
        if key == "views_per_doc":
            return f"{value:g}"
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(h for _, h in QUICKSTART_COLUMNS) + " |", "|" + "---|" * len(QUICKSTART_COLUMNS)]
    lines += ["| " + " | ".join(fmt(k, r.get(k)) for k, _ in QUICKSTART_COLUMNS) + " |" for r in record["rows"]]
    return "\n".join(lines)


def transfer_summary(data: str = "scifact") -> str:
    """The README's transfer table: one row per transferred system and source budget, its seeds aggregated (mean ±
    sd), with the paired test per seed against the transfer dpr of the same budget and seed (bold: a significant win
    on every tested seed; the full table is in docs/results.md)."""
    metric = DATASETS[data][2][0]
    steps_at = 1 + SEED_FLAG_KEYS.index("steps")  # setting = (data, *SEED_FLAG_KEYS values, flags, source)
    lines = [f"| system (trained on SQuAD-dev, evaluated on {DATASETS[data][0]}) | SQuAD steps | seeds | "
             f"{HEADERS.get(metric, metric)} | Δ top-1 vs dpr (per seed) | p vs dpr (per seed) | records |",
             "|" + "---|" * 7]
    for g in sorted((g for g in seed_groups(data) if g["setting"][-1]),
                    key=lambda g: (g["setting"][steps_at] or 0, g["system"] != "dpr", g["system"])):
        tested, win = tested_win(g)
        deltas, p_values = tested_cells(tested)
        name = SYSTEM_NAMES.get(g["system"], g["system"])
        lines.append("| " + " | ".join([
            f"**{name}**" if win else name, str(g["setting"][steps_at] or "–"), ", ".join(map(str, g["seeds"])),
            seed_summary(g, metric), deltas or "–", p_values or "–",
            ", ".join(f"`{r['_record']}`" for r in g["seeds"].values())]) + " |")
    return "\n".join(lines)


# The README's "which method" table: (what to use, its flags, record, system row). Each row is shown with every
# seed of its setting, dpr's mean at the same setting and the paired test against dpr of the same seed.
HEADLINE = [
    ("dcsr-mean: one vector per sentence, the mean of its token states in the passage encoding",
     "`--model_name dcsr --dcsr_sentence_pooling mean --pooling mean`", "squad-sel300-hybrid", "dcsr-mean-300"),
    ("dcsr-mean at 100 steps", "the same", "squad-sel-p1-dcsr-mean-hybrid", "dcsr-mean"),
    ("dcsr-mean + BM25: fused with BM25 at search time (score interpolation, weight chosen on dev)",
     "the same, then `driver.search --hybrid bm25`", "squad-sel300-hybrid", "dcsr-mean-300+bm25"),
    ("dce: one view per generated query", "`--model_name dce --pooling mean`", "squad-sel-dce-rerun", "dce"),
    ("mvr-residual: dpr's text encoding + 8 gated read-only viewers (step 0 = dpr)",
     "`--model_name mvr --mvr_views residual --pooling mean`", "squad-sel-mvr-residual-rerun", "mvr-residual"),
    ("mvr-residual at 300 steps", "the same", "squad-sel300-mvr-residual-rerun", "mvr-residual-300"),
    ("mvr-residual, 20 epochs at batch 64 (on a GPU)", "the same, `--per_device_train_batch_size 64`",
     "squad-gpu20-mvr-residual", "mvr-residual-20ep"),
    ("mvr-residual, 20 epochs, the MVR paper's annealed τ", "the same + `--temperature_schedule annealed "
     "--temperature 0.1 --mvr_alpha 1.0 --mvr_min_temperature 0.03`", "squad-gpu20-mvr-residual-annealed",
     "mvr-residual-20ep-annealed"),
    ("mlr-sc-mean: self-contrastive MLR on mean-pooled layers, dpr's index size",
     "`--model_name mlr --mlr_pooling self_contrastive --mlr_layer_pooling mean`", "squad-sel300-mlr-sc-mean-rerun",
     "mlr-sc-mean-300"),
    ("the peer: ColBERT trained with PyLate, one vector per token", "`bench/colbert_peer.py`",
     "squad-sel-colbert-pylate", "colbert-pylate"),
    ("dpr, the baseline", "`--model_name dpr --pooling mean`", "squad-sel-dpr-rerun", "dpr"),
]


def headline_table(data: str = "squad") -> str:
    """The README's method table: each HEADLINE row's top-1 over its seeds, against dpr of the same setting (steps,
    dev selection, lengths, batch, lr, train flags), with Δ and the paired test per seed; bold: a significant win."""
    metric = DATASETS[data][2][0]
    groups = seed_groups(data)
    found = {(r["_record"], r["system"]): g for g in groups for r in g["seeds"].values()}
    by_setting = {(g["system"], g["setting"]): g for g in groups}
    lines = ["| on a mean-pooled backbone | flags | steps | seeds | SQuAD-dev top-1 | dpr, same setting | "
             "Δ vs dpr (per seed) | p vs dpr (per seed) | vectors/doc | record |", "|" + "---|" * 10]

    for label, flags, record, system in HEADLINE:
        g = found.get((record, system))
        if g is None:
            raise SystemExit(f"bench/results.py HEADLINE: no row {system!r} in record {record!r}")
        row = next(r for r in g["seeds"].values() if r["_record"] == record)
        # dpr of the first of baseline_settings() that was run: its own setting, else baseline_row's fallbacks
        dpr = next((by_setting[("dpr", c)] for c in baseline_settings(g["setting"]) if ("dpr", c) in by_setting),
                   None)
        tested, win = tested_win(g)
        deltas, p_values = tested_cells(tested)
        vectors = row.get("views_per_doc", row.get("views"))
        value = seed_summary(g, metric)
        lines.append("| " + " | ".join([
            label, flags, str(row.get("steps", "–")), ", ".join(str(s) for s in g["seeds"]),
            f"**{value}**" if win else value, seed_summary(dpr, metric) if dpr and g["system"] != "dpr" else "–",
            deltas or "–", p_values or ("–" if system == "dpr" else "not tested"),
            cell(vectors), ", ".join(f"`{r['_record']}`" for r in g["seeds"].values())]) + " |")
    return "\n".join(lines)


def splice(text: str, start: str, end: str, body: str, where: Path) -> str:
    if start not in text or end not in text:
        raise SystemExit(f"{where} lacks the markers {start} ... {end}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def rendered(out: Path, readme: Path, write_plots: bool, base: Path | None = None) -> dict[Path, str]:
    """What ``out`` (the results page) and ``readme`` (the quickstart table) should hold, from the records.
    Plot links are relative to ``base`` (default: ``out``'s folder)."""
    base = base or out.resolve().parent
    tables = [table(d, selected, base=base, write_plot=write_plots) for d in DATASETS
              if (RESULTS / d).is_dir() for selected in (True, False) if records(d, selected)]
    tables += [table(d, False, base=base, write_plot=False, transfer=True) for d in DATASETS
               if (RESULTS / d).is_dir() and records(d, False, transfer=True)]
    tables += [t for d in DATASETS if (RESULTS / d).is_dir() for t in [significance_table(d)] if t]
    if (RESULTS / "squad").is_dir():
        tables += [t for t in [view_ablation_table("squad")] if t]
    body = "\n\n".join(tables)
    note = ("_Generated by `python bench/results.py render` from `results/`; lr and passage length per run are in "
            "the commands. Wall time: training + encoding + search of that system (older runs: training + "
            "encoding). Index MB: the float32 vectors searched (vectors x dim x 4; the quickstart's systems "
            "index MiniLM's 384-dim states in a Faiss Flat index, fused rows count the dense side only)._")
    pages = {out: splice(out.read_text(encoding="utf-8"), START, END, f"{body}\n\n{note}", out)}
    text = pages[readme] if readme in pages else readme.read_text(encoding="utf-8")  # read once, spliced in turn
    if QUICKSTART_RECORD.is_file():
        text = splice(text, QS_START, QS_END, quickstart_table(), readme)
    if (RESULTS / "scifact").is_dir() and records("scifact", False, transfer=True):
        text = splice(text, TR_START, TR_END, transfer_summary("scifact"), readme)
    if (RESULTS / "squad").is_dir() and HL_START in text:
        text = splice(text, HL_START, HL_END, headline_table("squad"), readme)
    pages[readme] = text
    return pages


def render(out: Path = RESULTS_PAGE, readme: Path = README) -> None:
    for path, text in rendered(out, readme, write_plots=True).items():
        path.write_text(text, encoding="utf-8")
        print(f"rendered {path}")


def check(out: Path = RESULTS_PAGE, readme: Path = README, base: Path | None = None) -> list[str]:
    """One line per line of a generated table that differs from what the records give (empty: all current)."""
    problems = []
    for path, want in rendered(out, readme, write_plots=False, base=base).items():
        have = path.read_text(encoding="utf-8")
        if have == want:
            continue
        have_lines, want_lines = have.splitlines(), want.splitlines()
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, have_lines, want_lines, autojunk=False).get_opcodes():
            if tag == "equal":
                continue
            for k in range(max(i2 - i1, j2 - j1)):
                line = i1 + min(k, max(i2 - i1 - 1, 0)) + 1
                is_ = repr(have_lines[i1 + k][:160]) if i1 + k < i2 else "(no line)"
                want_ = repr(want_lines[j1 + k][:160]) if j1 + k < j2 else "(no line)"
                problems.append(f"{path.name}:{line}: is {is_}, the records give {want_}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/results.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="Record a run's results.json.")
    a.add_argument("run_dir", type=Path, help="A quickstart --output_dir holding results.json.")
    a.add_argument("--name", required=True, help="Record name (results/<data>/<name>.json).")
    a.add_argument("--command", required=True, help="The exact command that produced the run.")
    a.add_argument("--systems", nargs="+", help="Keep only these systems' rows.")
    a.add_argument("--protocol", help="For a run made by another script (a peer system): the quickstart command "
                   "whose protocol it reproduces; the table reads the row's settings from it.")
    r = sub.add_parser("render", help="Rewrite docs/results.md's tables and the README's quickstart table.")
    c = sub.add_parser("check", help="Exit 1, one line per difference, when a generated table is not current.")
    for s in (r, c):
        s.add_argument("--out", type=Path, default=RESULTS_PAGE, help="The results page (default docs/results.md).")
        s.add_argument("--readme", type=Path, default=README, help="The page with the quickstart table (README.md).")
    args = p.parse_args(argv)
    if args.cmd == "add":
        add(args.run_dir, args.name, args.command, args.systems, args.protocol)
    elif args.cmd == "check":
        problems = check(args.out, args.readme)
        for line in problems:
            print(line)
        if problems:
            print(f"stale: run python bench/results.py render ({len(problems)} differences)", file=sys.stderr)
            return 1
        print(f"{args.out.name} and {args.readme.name}: tables match the records")
    else:
        render(args.out, args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
