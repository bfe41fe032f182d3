"""The generated tables of docs/results.md and the README, rendered from the run records
(:mod:`tools.reporting.records`) with the names and rows of ``results/presentation.json``
(:class:`Presentation`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from multiview_plugin.evaluation.significance import format_p
from tools.reporting import records as rec
from tools.reporting.plots import plot_curves

PRESENTATION_FILE = rec.ROOT / "results" / "presentation.json"


@dataclass
class Presentation:
    """What the tables show and how they name things, from ``results/presentation.json``: per data set its title,
    protocol and metrics (the first is the headline metric); column headers; system display names (their order is
    the row order); index vector dims per backbone; the README's method-table rows; the quickstart table's
    columns and names."""

    datasets: dict[str, tuple[str, str, list[str]]]
    headers: dict[str, str]
    system_names: dict[str, str]
    index_dims: dict[str, int]
    headline: list[tuple[str, str, str, str]]
    front: list[tuple[str, str, str, str]]
    quickstart_columns: list[tuple[str, str]]
    quickstart_names: dict[str, str]

    @classmethod
    def load(cls, path: Path = PRESENTATION_FILE) -> Presentation:
        d = json.loads(path.read_text(encoding="utf-8"))
        return cls(datasets={k: (v["title"], v["protocol"], v["metrics"]) for k, v in d["datasets"].items()},
                   headers=d["headers"], system_names=d["system_names"], index_dims=d["index_dims"],
                   headline=[(h["label"], h["flags"], h["record"], h["system"]) for h in d["headline"]],
                   front=[(h["label"], h["flags"], h["record"], h["system"]) for h in d.get("front", [])],
                   quickstart_columns=[(c["field"], c["header"]) for c in d["quickstart_columns"]],
                   quickstart_names=d["quickstart_names"])


P = Presentation.load()

SELECTED_NOTE = ("Model selection: articles {groups} are carved out of the training articles as a dev split "
                 "(their questions and paragraphs leave training); every system is checked on it every "
                 "{every} (step 0 included) and the best checkpoint is the one evaluated. Curves: "
                 "![training curves]({plot})")


def p_cell(p: float, test: str | None = None) -> str:
    """A p-value as the tables print it: two significant digits; one at its permutation test's floor (no sign
    flip of N as extreme as the observed difference: p = 1/(N+1)) as ``< 1/N`` (10,000 flips: ``< 0.0001``), the
    smallest p the test can tell (issue 37). Exact tests and t-tests have no such floor."""
    return format_p(p, test)


def cell(value) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def index_mb(row: dict, backbone: str) -> float | None:
    """Megabytes of the vectors the row's index searches: recorded ``index_bytes``, else vectors x dim x 4
    (float32) for the quickstart's backbones; None without vectors (BM25)."""
    if "index_bytes" in row:
        return row["index_bytes"] / 1e6
    if row.get("vectors") and backbone in P.index_dims:
        return row["vectors"] * P.index_dims[backbone] * 4 / 1e6
    return None


def ran_on(record: dict) -> str:
    """The suffix " (on <GPU>)" for a record whose rows ran on a CUDA device (rows record `device`; older: CPU)."""
    gpus = sorted({str(r["device"]) for r in record["rows"] if r.get("device", "cpu") != "cpu"})
    return f" (on {', '.join(gpus)})" if gpus else ""


def table(data: str, selected: bool = False, base: Path | None = None, write_plot: bool = True,
          transfer: bool = False) -> str:
    """One data set's runs table: every system's latest row, with its settings, costs and metrics."""
    base = base or rec.ROOT / "docs"
    title, protocol, metrics = P.datasets[data]
    rows: dict[str, dict] = {}
    chosen = rec.records(data, selected, transfer)
    if transfer:
        sources = sorted({rec.transfer_source(r) for r in chosen})
        title = (f"Zero-shot transfer to {title}: models trained on "
                 f"{', '.join(P.datasets.get(d, (d,))[0] for d in sources)}, evaluated unchanged")
        protocol = (protocol.split("; train:")[0] + f"; no {data} training: each model is the dev-selected "
                    "checkpoint of the run named by the command's `--models_from` (steps and batch are its training)")
    for record in chosen:
        s = rec.record_settings(record)
        for r in record["rows"]:
            wall = r.get("wall_s", r.get("train_s", 0.0) + r.get("encode_s", 0.0))
            rows[r["system"]] = {**r, "_wall": wall, "_record": record["name"],
                                 "_backbone": r.get("backbone", Path(s.backbone).name),
                                 "_batch": s.batch_size if r.get("steps") else "–", "_lr": s.learning_rate,
                                 "_len": s.passage_max_len}
    order = list(P.system_names)
    ranked = sorted(rows.values(), key=lambda r: order.index(r["system"]) if r["system"] in order else len(order))
    head = ["system", "backbone", "steps", *(["best step"] if selected else []), "batch", "wall s", "vectors/doc",
            "index MB", *(P.headers.get(m, m) for m in metrics), "run"]
    if selected and data == "squad" and chosen:  # the dev articles leave training: say how many questions remain
        trained = max((r.get("train_queries", 0) for c in chosen for r in c["rows"]), default=0)
        groups = rec.record_settings(chosen[-1]).dev_groups
        protocol = protocol.replace("train: 7,235 questions of articles 0–31",
                                    f"train: {trained:,} questions of articles 0–31 minus the dev articles {groups}")
    heading = f"**{title}**{' — dev-selected checkpoints' if selected else ''} — {protocol}; metrics in %."
    lines = [heading, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in ranked:
        vectors = (r["views_per_doc"] if "views_per_doc" in r else r.get("views")) or "–"  # older runs: views
        best = [str(r.get("best_step", "–"))] if selected else []
        lines.append("| " + " | ".join([P.system_names.get(r["system"], r["system"]), r["_backbone"],
                                        str(r["steps"]), *best, str(r["_batch"]), f"{r['_wall']:.0f}",
                                        cell(vectors), cell(index_mb(r, r["_backbone"])),
                                        *(cell(r.get(m)) for m in metrics), f"`{r['_record']}`"]) + " |")
    if selected and chosen:
        s = rec.record_settings(chosen[-1])
        plot = plot_curves(data, [r for r in ranked if r.get("curves", {}).get("loss")], write=write_plot)
        settings = [rec.record_settings(r) for r in chosen]
        schedules = sorted({(c.steps, c.dev_eval_steps) for c in settings if c.dev_groups})
        every = "; ".join(f"{e} steps in the {n}-step runs" for n, e in schedules)
        lines += ["", SELECTED_NOTE.format(groups=s.dev_groups, every=every,
                                              plot=Path(os.path.relpath(plot, base)).as_posix())]
    lines += ["", "Runs (`results/" + data + "/<run>.json`):", ""]
    lines += [f"- `{r['name']}`: `{r['command']}`{ran_on(r)}" for r in sorted(chosen, key=lambda r: r["name"])]
    return "\n".join(lines)


def seed_summary(g: dict | None, metric: str) -> str:
    """A seed group's ``metric`` as "mean ± sample sd" over its seeds ("mean" for one seed, "–" for none)."""
    values = [r[metric] for r in g["seeds"].values() if r.get(metric) is not None] if g else []
    if not values:
        return "–"
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else None
    return f"{mean:.1f}" + (f" ± {sd:.1f}" if sd is not None else "")


def tested_cells(tested: dict) -> tuple[str, str]:
    """The per-seed Δ and p cells of :func:`records.tested_win`'s tested seeds, in seed order ("" where none)."""
    return (", ".join(f"{t['p_delta']:+.1f}" for t in tested.values()),
            ", ".join(p_cell(t["p_value"], t.get("p_test")) for t in tested.values()))


def tested_baseline(g: dict, seed: int) -> dict | None:
    """The dpr row seed ``seed`` of group ``g`` was tested against: for a test made in the same run
    (``p_baseline``), that run's dpr row; else the dpr row of the same setting and seed
    (:func:`records.baseline_row`)."""
    row = g["seeds"][seed]
    if "p_baseline" in row:
        found = rec.load_record(row["_record"])
        same_run = next((r for r in found["rows"] if r["system"] == row["p_baseline"]), None)
        if same_run is not None:
            return same_run
    return g.get("baselines", {}).get(seed)


def baseline_cells(g: dict, metric: str, hits: bool = False) -> str:
    """Per seed of group ``g``, the ``metric`` of the dpr row it is tested against (``hits``: its top-1 hits from
    the per-question outcomes, the quantity the test compares), so that the row's value minus it is the Δ shown;
    "" for dpr itself."""
    if g["system"] == "dpr":
        return ""
    out = []
    for seed in g["seeds"]:
        base = tested_baseline(g, seed)
        value = None if base is None else (rec.top1_hits(base) if hits else base.get(metric))
        out.append(cell(value))
    return ", ".join(out)


def per_seed(g: dict, metric: str | None = None) -> str:
    """The group's value per seed, in seed order: ``metric``, or (None) its top-1 hits."""
    return ", ".join(cell(r.get(metric) if metric else rec.top1_hits(r)) for r in g["seeds"].values())


def significance_table(data: str) -> str | None:
    """Seeds and significance: every system run with 2+ seeds, or carrying a paired test against dpr."""
    title, _, metrics = P.datasets[data]
    metric = metrics[0]
    shown = [g for g in rec.seed_groups(data)
             if len(g["seeds"]) >= 2 or any(t.get("p_value") is not None for t in g["tests"].values())]
    if not shown:
        return None
    order = list(P.system_names)

    def key(g: dict) -> tuple:
        base = g["system"].split("+", 1)[0].split(" (", 1)[0]
        return (g["setting"][-1], g["setting"][1], order.index(base) if base in order else len(order), g["system"])

    head = ["system", "steps", "dev-selected", "seeds", f"{P.headers.get(metric, metric)} mean ± sd",
            "per seed", "Δ top-1 vs dpr (per seed)", "p vs dpr (per seed)", "significant win", "runs"]
    lines = [f"**{title}: seeds and paired significance** — {P.headers.get(metric, metric)} in %, mean ± sample "
             "standard deviation over seeds; p: two-sided paired randomization test (10,000 seeded sign flips, "
             "exact for few differences) of the per-question top-1 hits against dpr of the same budget and "
             "seed (and train flags, where such a dpr run exists: method-only flags such as --mvr_* never "
             "apply to dpr);"
             f" a significant win has p < {rec.SIGNIFICANCE_ALPHA} and a positive Δ for every tested seed "
             "(**bold**).", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in sorted(shown, key=key):
        tested, win = rec.tested_win(g)
        summary = seed_summary(g, metric)
        name = P.system_names.get(g["system"], g["system"])
        if g["setting"][-3] == "gpu":
            name += ", on a GPU"
        if g["setting"][-2]:  # a variant: its train flags
            name += f", `{g['setting'][-2]}`"
        if g["setting"][-1]:
            name += f", trained on {P.datasets.get(g['setting'][-1], (g['setting'][-1],))[0]} (zero-shot transfer)"
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
    metric = P.datasets[data][2][0]
    shown = [g for g in rec.seed_groups(data)
             if g["system"].split(" (", 1)[0].split("+", 1)[0].startswith(family) and not g["setting"][-1]]
    if not shown:
        return None
    head = ["system", "train flags", "steps", "dev-selected", "seed", P.headers.get(metric, metric), "Δ vs dpr",
            "p vs dpr", "view PPL", "LV", "best step", "run"]
    lines = [f"**{P.datasets[data][0]}: {family} ablations** — every recorded {family} run; Δ and p against dpr of "
             "the same budget and seed (and train flags where such a dpr run exists; paired randomization test on "
             "top-1 hits; – where a record has no per-question "
             "ranks); view PPL: the perplexity of which view wins each query (1 = one view wins all, k = even); LV: "
             "Local Variation of the view scores (MVR §5.2).", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for g in sorted(shown, key=lambda g: (g["system"], g["setting"][1], g["setting"][-2])):
        for seed, r in g["seeds"].items():
            t = g["tests"].get(seed, {})
            lines.append("| " + " | ".join([
                P.system_names.get(g["system"], g["system"]) + (", on a GPU" if g["setting"][-3] == "gpu" else ""),
                f"`{g['setting'][-2]}`" if g["setting"][-2] else "–",
                str(g["setting"][1]), "yes" if g["setting"][2] else "no", str(seed), cell(r.get(metric)),
                f"{t['p_delta']:+.1f}" if t.get("p_delta") is not None else "–",
                p_cell(t["p_value"], t.get("p_test")) if t.get("p_value") is not None else "–",
                f"{r['PPL']:.2f}" if r.get("PPL") is not None else "–",
                f"{r['LV']:.2g}" if r.get("LV") is not None else "–", str(r.get("best_step", "–")),
                f"`{r['_record']}`"]) + " |")
    return "\n".join(lines)


def quickstart_table(record: dict) -> str:
    """The quickstart's table, from the quickstart's record (or a fresh run's rows in the same form); a p at its
    test's floor is written as the bound it is (``< 0.0001``, :func:`p_cell`)."""
    def fmt(key: str, value, row: dict) -> str:
        if value is None or value == "":
            return ""
        if key == "system":
            return P.quickstart_names.get(value, value)
        if key == "LV":
            return f"{value:.2g}"
        if key == "PPL":
            return f"{value:.2f}"
        if key == "p_value":
            return p_cell(value, row.get("p_test"))
        if key == "p_delta":
            return f"{value:+.1f}"
        if key == "views_per_doc":
            return f"{value:g}"
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    cols = P.quickstart_columns
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(k, r.get(k), r) for k, _ in cols) + " |" for r in record["rows"]]
    return "\n".join(lines)


def transfer_summary(data: str = "scifact") -> str:
    """The README's transfer table: one row per transferred system and source budget, its seeds aggregated (mean ±
    sd) on the data set's metric, and per seed the top-1 hits the paired test compares, the top-1 of the
    SQuAD-trained dpr of the same budget and seed it is tested against, Δ and p (bold: a significant win on every
    tested seed; the full table is in docs/results.md)."""
    metric = P.datasets[data][2][0]
    steps_at = 1 + rec.SEED_FLAG_KEYS.index("steps")  # setting = (data, *SEED_FLAG_KEYS values, flags, source)
    lines = [f"| system (trained on SQuAD-dev, evaluated on {P.datasets[data][0]}) | SQuAD steps | seeds | "
             f"{P.headers.get(metric, metric)} | top-1 (per seed) | dpr top-1 (same seed) | "
             "Δ top-1 vs dpr (per seed) | p vs dpr, top-1 (per seed) | records |",
             "|" + "---|" * 9]
    for g in sorted((g for g in rec.seed_groups(data) if g["setting"][-1]),
                    key=lambda g: (g["setting"][steps_at] or 0, g["system"] != "dpr", g["system"])):
        tested, win = rec.tested_win(g)
        deltas, p_values = tested_cells(tested)
        name = P.system_names.get(g["system"], g["system"])
        lines.append("| " + " | ".join([
            f"**{name}**" if win else name, str(g["setting"][steps_at] or "–"), ", ".join(map(str, g["seeds"])),
            seed_summary(g, metric), per_seed(g), baseline_cells(g, metric, hits=True) or "–",
            deltas or "–", p_values or "–",
            ", ".join(f"`{r['_record']}`" for r in g["seeds"].values())]) + " |")
    return "\n".join(lines)


def _headline_cells(spec: list[tuple[str, str, str, str]], data: str, where: str) -> list[dict[str, str]]:
    """The cells of each ``(label, flags, record, system)`` row of ``spec``: top-1 per seed (bold: a significant
    win on every seed) and their mean ± sd, the dpr each seed is tested against, Δ and p per seed."""
    metric = P.datasets[data][2][0]
    found = {(r["_record"], r["system"]): g for g in rec.seed_groups(data) for r in g["seeds"].values()}
    rows = []
    for label, flags, record, system in spec:
        g = found.get((record, system))
        if g is None:
            raise SystemExit(f"results/presentation.json {where}: no row {system!r} in record {record!r}")
        row = next(r for r in g["seeds"].values() if r["_record"] == record)
        tested, win = rec.tested_win(g)
        deltas, p_values = tested_cells(tested)
        summary = seed_summary(g, metric) if len(g["seeds"]) > 1 else per_seed(g, metric)
        value = per_seed(g, metric) + (f" ({summary})" if len(g["seeds"]) > 1 else "")
        rows.append({"label": label, "flags": flags, "steps": str(row.get("steps", "–")),
                     "seeds": ", ".join(str(s) for s in g["seeds"]),
                     "value": f"**{value}**" if win else value, "mean": f"**{summary}**" if win else summary,
                     "dpr": baseline_cells(g, metric) or "–", "delta": deltas or "–",
                     "p": p_values or ("–" if system == "dpr" else "not tested"),
                     "vectors": cell(row.get("views_per_doc", row.get("views"))),
                     "records": ", ".join(f"`{r['_record']}`" for r in g["seeds"].values())})
    return rows


def headline_table(data: str = "squad") -> str:
    """The method table of docs/results.md: each headline row's top-1 per seed (and mean ± sd over seeds), the top-1
    of the dpr each seed is tested against (same setting: steps, dev selection, lengths, batch, lr, train flags;
    same seed), Δ and the paired test per seed; bold: a significant win."""
    lines = ["| on a mean-pooled backbone | flags | steps | seeds | SQuAD-dev top-1 (per seed; mean ± sd) | "
             "dpr top-1 (same setting and seed) | Δ vs dpr (per seed) | p vs dpr (per seed) | vectors/doc | record |",
             "|" + "---|" * 10]
    for c in _headline_cells(P.headline, data, "headline"):
        lines.append("| " + " | ".join(c[k] for k in ("label", "flags", "steps", "seeds", "value", "dpr", "delta",
                                                      "p", "vectors", "records")) + " |")
    return "\n".join(lines)


def front_table(data: str = "squad") -> str:
    """The README's results table (results/presentation.json "front", at most 8 rows): method, flags, budget,
    seeds, top-1 (mean ± sd over seeds; bold: a significant win over dpr on every seed), Δ and p per seed, vectors
    per document."""
    if len(P.front) > 8:
        raise SystemExit(f"results/presentation.json front: {len(P.front)} rows, the README shows at most 8")
    lines = ["| method | flags | steps | seeds | SQuAD-dev top-1 | Δ vs dpr (per seed) | p (per seed) | vectors/doc |",
             "|" + "---|" * 8]
    for c in _headline_cells(P.front, data, "front"):
        lines.append("| " + " | ".join(c[k] for k in ("label", "flags", "steps", "seeds", "mean", "delta", "p",
                                                      "vectors")) + " |")
    return "\n".join(lines)
