"""Quickstart: one vector per passage against several, on real text: (train →) encode → index → search → evaluate.

    python -m multiview_plugin.quickstart                       # a SQuAD slice shipped with the package, offline
    python -m multiview_plugin.quickstart --data squad --squad_path $DATA/squad/dev-v1.1.json --steps 100

By default (``--data squad-slice``) it runs the SQuAD-dev protocol on 6 whole articles of SQuAD v1.1 dev shipped
with the package (CC BY-SA 4.0; multiview_plugin/quickstart/data/LICENSE-squad-dev-slice.md), offline:
all-MiniLM-L6-v2 as one mean-pooled vector per passage (dpr-zero-shot) against the same untrained model with
several vectors per passage (segment-means-zero-shot: the means of 8 token segments; dcsr-mean-zero-shot: one
mean per sentence), each evaluated on the 712 questions of 3 held-out articles over all 277 paragraphs: answer
top-1, its difference from dpr-zero-shot and a paired test. A few minutes on 2 CPU cores. Models go to
<output_dir>/models/<system> (load one with multiview_plugin.MultiViewModel.load), the rows to
<output_dir>/results.json.

    python -m multiview_plugin.quickstart --systems dpr-zero-shot dcsr-mean-zero-shot dpr dcsr-mean

adds dpr and dcsr-mean fine-tuned for --steps (100) on the other 3 articles' 1,169 questions (far longer than
the default run on a CPU). ``--data entities`` runs a generated dataset of fictional entities instead,
``--data squad`` / ``--data scifact`` the full protocols (docs/data-formats.md, docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cli, parse_dataclasses, setup_logging
from multiview_plugin.data.answers import load_answers
from multiview_plugin.data.readers import load_corpus, load_qrels, load_queries
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.encoding.shard_sets import load_query_reps
from multiview_plugin.encoding.shards import read_shard, split_lookup
from multiview_plugin.evaluation.answers import build_retrieval, retrieval_accuracy
from multiview_plugin.evaluation.metrics import evaluate_run
from multiview_plugin.evaluation.runs import to_run, write_run
from multiview_plugin.quickstart.options import BM25, DESCRIPTIONS, SYSTEMS, build_parser, train_seed
from multiview_plugin.records import dumps_rows
from multiview_plugin.registry import get_encoder_class

# torch, the encoders, the encoding loop and the searchers are imported in the functions that use them, so that
# ``--help`` loads none of them

logger = logging.getLogger("multiview_plugin.quickstart")



def prepare_data(args: argparse.Namespace, data_dir: Path) -> dict[str, Path]:
    if args.data == "entities":
        from multiview_plugin.quickstart.dataset import build_quickstart_data, write_quickstart_data

        sizes = {} if args.num_entities is None else {"num_entities": args.num_entities}
        try:
            data = build_quickstart_data(**sizes)
        except ValueError as e:
            raise SystemExit(f"error: --num_entities: {e}") from None
        files = write_quickstart_data(data, data_dir)
    elif args.data == "squad-slice":
        from multiview_plugin.data.squad import write_squad_split
        from multiview_plugin.quickstart.squad_slice import convert_slice

        files = write_squad_split(convert_slice(), data_dir)
    elif args.data == "scifact":
        from multiview_plugin.data.beir import convert_beir

        if not args.beir_dir:
            raise SystemExit("--data scifact needs --beir_dir (e.g. ../shared/data/beir/scifact)")
        files = convert_beir(args.beir_dir, data_dir, dev_size=args.dev_size)
    else:
        from multiview_plugin.data.squad import convert_squad, write_squad_split

        if not args.squad_path:
            raise SystemExit("--data squad needs --squad_path (e.g. ../shared/data/squad/dev-v1.1.json)")
        files = write_squad_split(convert_squad(args.squad_path), data_dir)
        if args.dev_groups:
            from multiview_plugin.data.dev_split import carve_dev_split, parse_groups

            files.update(carve_dev_split(files["train"], files["corpus"], data_dir / "selection",
                                         parse_groups(args.dev_groups)))
    return {k: Path(v) for k, v in files.items()}


def train_system(name: str, args: argparse.Namespace, files: dict[str, Path], out: Path
                 ) -> tuple[Path, float, dict]:
    """Train (or, for untrained systems, just build) one system. Returns the folder of the model to evaluate
    (with dev selection: the best one on dev), the training time and its curves (loss; dev metric)."""
    model_name, flags, trained = SYSTEMS[name]
    model_dir = out / "models" / (name + args.tag)
    start = time.perf_counter()
    common = ["--model_name", model_name, "--model_name_or_path", args.backbone,
              "--query_max_len", "32", "--passage_max_len", str(args.passage_max_len), *flags]
    if not trained:
        margs, dargs = parse_dataclasses((ModelArguments, DataArguments), common)
        get_encoder_class(model_name).build(margs, dargs).save(model_dir)
        return model_dir, 0.0, {}
    dev = []
    if "dev_queries" in files:
        dev = ["--dev_queries", str(files["dev_queries"]), "--dev_qrels", str(files["dev_qrels"]),
               "--dev_corpus", str(files["dev_corpus"]), "--dev_eval_steps", str(args.dev_eval_steps),
               "--dev_patience", str(args.dev_patience)]
        if model_name == "dce":  # the dev corpus's views, made as for the evaluation corpus
            from multiview_plugin.data.pseudo_queries import write_sentence_queries

            dev_views = write_sentence_queries(str(files["dev_corpus"]), out / "data" / "dev_sentence_queries.jsonl",
                                               max_queries=args.dce_max_queries)
            dev += ["--dev_pseudo_queries", str(dev_views)]
    rc = train_main([*common, "--dataset_path", str(files["train"]), "--output_dir", str(model_dir),
                     "--overwrite_output_dir", "--max_steps", str(args.steps),
                     "--per_device_train_batch_size", str(args.batch_size), "--train_group_size", "2",
                     "--learning_rate", str(args.learning_rate), "--warmup_ratio", "0.1",
                     "--logging_steps", str(max(1, args.steps // 20)), "--save_strategy", "no",
                     "--report_to", "none", "--seed", "42", "--dataloader_num_workers", "0",
                     *dev, *shlex.split(args.train_flags)])
    if rc != 0:
        raise SystemExit(f"training {name} failed")
    elapsed = time.perf_counter() - start
    curves = training_curves(model_dir)
    return (model_dir / "best" if dev else model_dir), elapsed, curves


def transferred_model(run_dir: Path, name: str) -> tuple[Path, dict]:
    """The model of ``name`` saved by an earlier quickstart run (its --output_dir): the dev-selected ``best``
    checkpoint where there is one, and that run's curves."""
    from multiview_plugin.errors import ConfigError

    model_dir = run_dir / "models" / name
    if not model_dir.is_dir():
        raise ConfigError(f"--models_from {run_dir}: no model of {name!r} in {run_dir / 'models'}")
    return (model_dir / "best" if (model_dir / "best").is_dir() else model_dir), training_curves(model_dir)


def training_curves(model_dir: Path) -> dict:
    """``{"loss": [[step, loss], ...], "dev": [[step, value], ...], "dev_metric", "best_step"}`` of a run."""
    curves: dict = {}
    state = model_dir / "trainer_state.json"
    if state.is_file():
        history = json.loads(state.read_text(encoding="utf-8"))["log_history"]
        curves["loss"] = [[h["step"], round(h["loss"], 5)] for h in history if "loss" in h]
    dev = model_dir / "dev_curve.json"
    if dev.is_file():
        data = json.loads(dev.read_text(encoding="utf-8"))
        key = f"dev_{data['metric']}"
        curves.update(dev=[[p["step"], round(p[key], 5)] for p in data["curve"]], dev_metric=data["metric"],
                      best_step=data["best_step"])
    return curves


METRICS = ["MRR@10", "nDCG@10", "R@1", "R@5", "R@20"]


@dataclass
class EvalData:
    """The evaluation side of the data, read once per run: corpus (formatted texts, and title/text pairs for
    answer matching), eval queries, qrels and, where the data has them, answers."""

    corpus: dict[str, str]
    passages: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    answers: dict[str, list[str]] | None

    @classmethod
    def load(cls, files: dict[str, Path]) -> EvalData:
        rows = [json.loads(line) for line in files["corpus"].read_text(encoding="utf-8").splitlines()]
        return cls(corpus=load_corpus(files["corpus"]),
                   passages={c["docid"]: (c.get("title", ""), c["text"]) for c in rows},
                   queries=load_queries(files["eval_queries"]), qrels=load_qrels(files["eval_qrels"]),
                   answers=load_answers(files["eval_answers"]) if "eval_answers" in files else None)


def score_run(run: dict, data: EvalData) -> dict:
    """Ranking metrics (%), DPR answer accuracy where the data has answers, and the per-question outcome that
    paired significance tests need (``per_query``, see :func:`per_query_ranks`)."""
    metrics = evaluate_run(run, data.qrels, METRICS)
    row = {k: 100.0 * v for k, v in metrics.items()}  # percentages, like the answer accuracies
    if data.answers is not None:
        retrieval = build_retrieval(run, data.queries, data.answers, data.passages, depth=EVAL_DEPTH,
                                    store_text=False)
        row.update({f"answer_{k}": v for k, v in retrieval_accuracy(retrieval, ks=(1, 5, 20)).items()})
        ranks = [next((i for i, c in enumerate(item["contexts"]) if c["has_answer"]), -1)
                 for item in retrieval.values()]
        row["per_query"] = {"outcome": "answer", "depth": EVAL_DEPTH, "ranks": ranks}
    else:
        row["per_query"] = {"outcome": "relevant", "depth": EVAL_DEPTH, "ranks": per_query_ranks(run, data)}
    return row


EVAL_DEPTH = 20


def per_query_ranks(run: dict, data: EvalData) -> list[int]:
    """Per evaluation query (qrels order), the 0-based rank of its first relevant passage in ``run``, -1 when
    none is within the run's top :data:`EVAL_DEPTH`."""
    ranks = []
    for qid, judged in data.qrels.items():
        relevant = {d for d, rel in judged.items() if rel > 0}
        hits = [d for d, _ in run.get(qid, [])][:EVAL_DEPTH]
        ranks.append(next((i for i, d in enumerate(hits) if d in relevant), -1))
    return ranks


def baseline_of(row: dict, systems: set[str], tag: str = "") -> str:
    """The dpr row a row is tested against: ``dpr-zero-shot`` (the untrained one-vector model) for an untrained
    row where the run has it, else ``dpr`` (both with the run's --tag)."""
    if not row.get("steps") and f"dpr-zero-shot{tag}" in systems:
        return f"dpr-zero-shot{tag}"
    return f"dpr{tag}"


def add_significance(rows: list[dict], tag: str = "", num_permutations: int = 10_000, seed: int = 0) -> None:
    """Give every row with per-question outcomes a paired test of its top-1 hits against its dpr row
    (:func:`baseline_of`; the same run, so the same questions): ``p_value`` (paired randomization),
    ``p_value_ttest``, ``p_test``, ``p_delta``, ``p_wins`` / ``p_losses`` (questions only it / only the baseline
    gets right at top-1), ``p_baseline``. Rows of runs without that baseline get none."""
    from multiview_plugin.evaluation.significance import compare_ranks, hits_at

    by_name = {r["system"]: r for r in rows if "per_query" in r}
    for r in rows:
        base = by_name.get(baseline_of(r, set(by_name), tag))
        if base is None or r is base or "per_query" not in r \
                or r["per_query"]["outcome"] != base["per_query"]["outcome"]:
            continue
        a, b = hits_at(r["per_query"]["ranks"], 1), hits_at(base["per_query"]["ranks"], 1)
        r.update(compare_ranks(r["per_query"]["ranks"], base["per_query"]["ranks"], 1, num_permutations, seed),
                 p_wins=int(((a == 1) & (b == 0)).sum()), p_losses=int(((a == 0) & (b == 1)).sum()),
                 p_baseline=base["system"])


def format_p(row: dict) -> str:
    """A row's p for printing (:func:`~multiview_plugin.evaluation.significance.format_p`): ``< 0.0001`` at its
    Monte Carlo test's floor; '' without a test."""
    from multiview_plugin.evaluation.significance import format_p as p_text

    return p_text(row.get("p_value"), row.get("p_test", ""))


def relative_paths(value, out: Path):
    """``value`` (a row, recursively) with every string that names a path under ``out`` (as given, or resolved)
    made relative to ``out``: the record holds no path of the machine that made it (view_info's corpus, the
    encode input's source)."""
    if isinstance(value, dict):
        return {k: relative_paths(v, out) for k, v in value.items()}
    if isinstance(value, list):
        return [relative_paths(v, out) for v in value]
    if isinstance(value, str):
        for base in (str(out), str(out.resolve())):
            if value.startswith(base.rstrip("/") + "/"):
                return value[len(base.rstrip("/")) + 1:]
    return value


@dataclass
class Hybrid:
    """Dense + BM25 fusion rows (:mod:`multiview_plugin.search.hybrid`): the BM25 runs of the evaluation
    queries and, where the data has a dev split, of the dev queries (alpha is chosen there)."""

    eval_run: dict
    dev_run: dict | None
    alphas: list[float]
    default_alpha: float
    depth: int = 100

    @classmethod
    def build(cls, data: EvalData, files: dict[str, Path], alphas: list[float], default_alpha: float) -> Hybrid:
        from multiview_plugin.search.hybrid import BM25Searcher

        eval_run = BM25Searcher(data.corpus).search(list(data.queries.values()), list(data.queries), cls.depth)
        dev_run = None
        if "dev_queries" in files:
            dev_queries = load_queries(files["dev_queries"])
            dev_run = BM25Searcher(load_corpus(files["dev_corpus"])).search(list(dev_queries.values()),
                                                                          list(dev_queries), cls.depth)
        return cls(eval_run, dev_run, alphas, default_alpha)


def hybrid_rows(label: str, dense_run: dict, dev_dense_run: dict | None, hybrid: Hybrid, files: dict[str, Path],
                data: EvalData) -> list[dict]:
    """``<label>+bm25`` (score interpolation, alpha chosen on the dev split's MRR@10, else the fixed default) and
    ``<label>+bm25 (rrf)`` (reciprocal rank fusion, k = 60), each cut to the evaluated depth."""
    from multiview_plugin.search.hybrid import fuse_runs, select_alpha

    rows = []
    if dev_dense_run is not None and hybrid.dev_run is not None:
        dev_qrels = load_qrels(files["dev_qrels"])
        alpha, sweep = select_alpha(dev_dense_run, hybrid.dev_run,
                                    lambda run: evaluate_run(run, dev_qrels, ["MRR@10"])["MRR@10"], hybrid.alphas,
                                    "interpolation", EVAL_DEPTH)
        source = "dev MRR@10"
    else:
        alpha, sweep, source = hybrid.default_alpha, [], "fixed (no dev split)"
    for fusion, name in (("interpolation", f"{label}+bm25"), ("rrf", f"{label}+bm25 (rrf)")):
        start = time.perf_counter()
        rrf_alpha = 0.5  # equal weights: the plain reciprocal rank fusion the row's name says
        run = fuse_runs(dense_run, hybrid.eval_run, fusion, alpha if fusion == "interpolation" else rrf_alpha,
                        EVAL_DEPTH)
        fuse_ms = 1000 * (time.perf_counter() - start) / max(1, len(run))
        row = {"system": name, "hybrid": "bm25", "fusion": fusion, "fuse_ms_per_query": fuse_ms}
        if fusion == "interpolation":
            row.update(hybrid_alpha=alpha, hybrid_alpha_source=source, hybrid_dev_sweep=sweep)
        rows.append({**row, **score_run(run, data)})
    return rows


def evaluate_bm25(data: EvalData, out: Path) -> list[dict]:
    from multiview_plugin.data.bm25 import bm25_search

    docids = np.array(list(data.corpus), dtype=object)
    start = time.perf_counter()
    idx, scores = bm25_search(list(data.corpus.values()), list(data.queries.values()), 20)
    search_ms = 1000 * (time.perf_counter() - start) / max(1, len(data.queries))
    run = to_run(list(data.queries), docids[idx], scores)
    write_run(run, out / "runs" / "bm25.trec", tag=BM25)
    return [{"system": BM25, "views_per_doc": 0, "search_ms_per_query": search_ms, **score_run(run, data)}]


def dev_dense_run(name: str, model, files: dict[str, Path], out: Path, dce_max_queries: int, depth: int) -> dict:
    """The model's run of the dev split's queries over the dev corpus (index aggregation), for choosing fusion
    weights on dev."""
    from multiview_plugin.encoding.encode import encode_to_shard
    from multiview_plugin.search import MultiVectorSearcher, build_index

    emb = out / "emb" / f"{name}-dev"
    pseudo_queries = None
    if model.config.model_name == "dce":
        from multiview_plugin.data.pseudo_queries import write_sentence_queries

        pseudo_queries = str(write_sentence_queries(str(files["dev_corpus"]),
                                                    out / "data" / "dev_sentence_queries.jsonl",
                                                    max_queries=dce_max_queries))
    encode_to_shard(model, str(files["dev_corpus"]), emb / "corpus.0.pkl", batch_size=32, overwrite=True,
                    pseudo_queries=pseudo_queries)
    encode_to_shard(model, str(files["dev_queries"]), emb / "queries.pkl", is_query=True, batch_size=64,
                    overwrite=True)
    build_index([emb / "corpus.0.pkl"], out / "indexes" / f"{name}-dev", overwrite=True)
    q_reps, q_ids = load_query_reps(str(emb / "queries.pkl"))
    docids, scores = MultiVectorSearcher(out / "indexes" / f"{name}-dev").search_vectors(q_reps, depth)
    return to_run(q_ids, docids, scores)


def evaluate_system(name: str, model_dir: Path, files: dict[str, Path], data: EvalData, out: Path,
                    dce_max_queries: int = 10, hybrid: Hybrid | None = None) -> list[dict]:
    """One row per aggregation: the index's own, plus max where that is something else (dcsr: HasAns); with
    ``hybrid``, the index aggregation's dense + BM25 fusion rows too."""
    from multiview_plugin.encoding.encode import encode_to_shard
    from multiview_plugin.modeling import load_encoder
    from multiview_plugin.search import MultiVectorSearcher, build_index

    model = load_encoder(model_dir).eval()
    emb = out / "emb" / name
    start = time.perf_counter()
    pseudo_queries = None
    if model.config.model_name == "dce":
        from multiview_plugin.data.pseudo_queries import write_sentence_queries

        pseudo_queries = str(write_sentence_queries(str(files["corpus"]), out / "data" / "sentence_queries.jsonl",
                                                    max_queries=dce_max_queries))
    encode_to_shard(model, str(files["corpus"]), emb / "corpus.0.pkl", batch_size=32, overwrite=True,
                    pseudo_queries=pseudo_queries)
    encode_to_shard(model, str(files["eval_queries"]), emb / "queries.pkl", is_query=True, batch_size=64,
                    overwrite=True)
    encode_s = time.perf_counter() - start
    index_dir = out / "indexes" / name
    meta = build_index([emb / "corpus.0.pkl"], index_dir, overwrite=True)
    q_reps, q_ids = load_query_reps(str(emb / "queries.pkl"))
    diagnostics = view_diagnostics(emb / "corpus.0.pkl", q_reps, q_ids, data.qrels)
    rows = []
    for aggregation in dict.fromkeys([meta.aggregation, "max"]):
        label = name if aggregation == meta.aggregation else f"{name} ({aggregation})"
        searcher = MultiVectorSearcher(index_dir, aggregation=aggregation)
        start = time.perf_counter()
        docids, scores = searcher.search_vectors(q_reps, 20)
        search_ms = 1000 * (time.perf_counter() - start) / max(1, len(q_ids))
        run = to_run(q_ids, docids, scores)
        write_run(run, out / "runs" / f"{label.replace(' ', '')}.trec", tag=name)
        rows.append({"system": label, "aggregation": aggregation, "views": meta.max_views,
                     "views_per_doc": round(meta.mean_views, 2), "vectors": meta.num_vectors, **diagnostics,
                     **meta.extra, "encode_s": encode_s, "search_ms_per_query": search_ms,
                     **score_run(run, data)})
        if hybrid is not None and aggregation == meta.aggregation:
            deep_ids, deep_scores = searcher.search_vectors(q_reps, hybrid.depth)
            dev_run = (dev_dense_run(name, model, files, out, dce_max_queries, hybrid.depth)
                       if hybrid.dev_run is not None else None)
            for row in hybrid_rows(label, to_run(q_ids, deep_ids, deep_scores), dev_run, hybrid, files, data):
                rows.append({"aggregation": aggregation, "views": meta.max_views,
                             "views_per_doc": round(meta.mean_views, 2), "vectors": meta.num_vectors,
                             "encode_s": encode_s, **row})
    return rows


def run_device() -> str:
    """Where the run trained and encoded (recorded with every row): the CUDA device's name, else "cpu"."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def view_diagnostics(shard: Path, q_reps: np.ndarray, q_ids: list[str], qrels: dict) -> dict:
    """MVR §5.2: Local Variation and view perplexity over (eval query, gold passage) pairs; {} for one view."""
    import torch

    from multiview_plugin.scoring import local_variation, view_perplexity

    reps, lookup, info = read_shard(shard)
    if info is None or not info.multi_vector or info.views_per_doc == "variable":
        return {}
    k = int(info.views_per_doc)
    doc_row = {d: i for i, d in enumerate(split_lookup(lookup, True)[::k])}
    pairs = [(qi, doc_row[d]) for qi, qid in enumerate(q_ids) for d in qrels.get(qid, {}) if d in doc_row]
    q_idx, d_idx = (torch.tensor(x) for x in zip(*pairs))
    views = torch.from_numpy(np.asarray(reps, dtype=np.float32).reshape(-1, k, reps.shape[1]))[d_idx]
    scores = torch.einsum("nd,nkd->nk", torch.from_numpy(q_reps)[q_idx], views)
    return {"LV": float(local_variation(scores)), "PPL": float(view_perplexity(scores, d_idx))}


def top1(row: dict) -> float | None:
    """The top-1 the paired test compares: answer top-1 where the data has answers, else R@1 (relevant passage)."""
    return row.get("answer_Top1", row.get("R@1"))


def format_table(rows: list[dict]) -> str:
    """The printed Markdown table (metrics in %): per row its steps, vectors per passage, MRR@10, R@5, top-1, and
    against its dpr row (:func:`baseline_of`) Δ top-1, the questions only it / only dpr gets right, and p."""
    def num(value, fmt: str = ".1f") -> str:
        return "" if value is None else format(value, fmt)

    header = ["system", "steps", "vectors/doc", "MRR@10", "R@5", "top-1", "Δ top-1 vs dpr", "wins/losses", "p",
              "vs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        pair = f"{r['p_wins']}/{r['p_losses']}" if "p_wins" in r else ""
        lines.append("| " + " | ".join([
            r["system"], str(r.get("steps", "")), num(r.get("views_per_doc"), "g"), num(r.get("MRR@10")),
            num(r.get("R@5")), num(top1(r)), num(r.get("p_delta"), "+.1f"), pair, format_p(r),
            r.get("p_baseline", "")]) + " |")
    return "\n".join(lines)


def describe_systems(rows: list[dict], tag: str = "") -> list[str]:
    """One line per system of the run that :data:`DESCRIPTIONS` explains."""
    names = dict.fromkeys(r["system"].split(" (")[0].removesuffix(tag) if tag else r["system"].split(" (")[0]
                          for r in rows)
    lines = [f"  {n}: {DESCRIPTIONS[n]}" for n in names if n in DESCRIPTIONS]
    if any(r.get("aggregation") == "hasans" for r in rows):
        lines.append("  dcsr rows rank a passage by HasAns over its sentences (DCSR's eq. 2); '(max)': by its best "
                     "sentence")
    return lines


def api_hint(out: Path, rows: list[dict]) -> list[str]:
    """Where the models are and four lines of Python that load one (the first multi-view one), index two texts with
    it (under ``out``) and search them."""
    models = [r for r in rows if "views" in r and "hybrid" not in r]  # not bm25, not fused rows
    names = [r["system"].split(" (")[0] for r in models]
    multi = [r["system"].split(" (")[0] for r in models if r["views_per_doc"] > 1]
    if not names:
        return []
    docs = {"d1": "Paris is the capital of France.", "d2": "Hamlet is a play by William Shakespeare."}
    return [f"models: {out / 'models'}/<system> (one folder per system above); use one from Python:",
            "    from multiview_plugin import MultiViewModel",
            f"    model = MultiViewModel.load({str(out / 'models' / (multi or names)[0])!r}, device='cpu')",
            f"    searcher = model.index({docs!r}, {str(out / 'demo-index')!r}, overwrite=True)",
            "    print(searcher.search('who wrote hamlet?', k=1)[0].docid)  # d2"]


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(__doc__).parse_args(argv)
    if args.num_entities is not None and args.data != "entities":
        raise SystemExit(f"error: --num_entities sizes the generated dataset (--data entities), not --data "
                         f"{args.data}")
    setup_logging(logging.WARNING)
    logging.getLogger("multiview_plugin.quickstart").setLevel(logging.INFO)
    import torch

    torch.manual_seed(0)
    np.random.seed(0)
    out = Path(args.output_dir)
    total = time.perf_counter()
    files = prepare_data(args, out / "data")
    data = EvalData.load(files)
    n_corpus, n_eval = len(data.corpus), len(data.queries)
    n_train = sum(1 for _ in files["train"].open(encoding="utf-8"))
    logger.info("data: %d passages, %d train questions, %d eval questions", n_corpus, n_train, n_eval)
    rows = []
    setting = {"data": args.data, "backbone": Path(args.backbone).name, "batch_size": args.batch_size,
               "learning_rate": args.learning_rate, "passage_max_len": args.passage_max_len,
               "train_queries": n_train, "eval_queries": n_eval, "corpus": n_corpus, "device": run_device()}
    hybrid = None
    if args.hybrid:
        from multiview_plugin.search.hybrid import DEFAULT_ALPHA, check_fusion

        alpha = DEFAULT_ALPHA if args.hybrid_alpha is None else args.hybrid_alpha
        for a in [*args.hybrid_alphas, alpha]:
            check_fusion("interpolation", a)
        hybrid = Hybrid.build(data, files, args.hybrid_alphas, alpha)
    for name in args.systems:
        start = time.perf_counter()
        if name == BM25:
            logger.info("== bm25: search, evaluate")
            found = evaluate_bm25(data, out)
            for row in found:
                row.update(steps=0, train_s=0.0, backbone="bm25s")
        else:
            if args.models_from and SYSTEMS[name][2]:
                model_dir, curves = transferred_model(Path(args.models_from), name)
                train_s = 0.0
                logger.info("== %s: evaluating %s (trained in another run: transfer)", name, model_dir)
            else:
                logger.info("== %s: train", name)
                model_dir, train_s, curves = train_system(name, args, files, out)
            logger.info("== %s: encode, index, search, evaluate", name)
            found = evaluate_system(name + args.tag, model_dir, files, data, out, args.dce_max_queries, hybrid)
            for row in found:
                row.update(steps=args.steps if SYSTEMS[name][2] else 0, train_s=train_s, curves=curves,
                           train_flags=args.train_flags, seed=train_seed(args.train_flags))
                if "best_step" in curves:
                    row["best_step"] = curves["best_step"]
                if args.models_from and SYSTEMS[name][2]:
                    row["transfer_from"] = str(model_dir)
        for row in found:
            rows.append({**setting, **row, "wall_s": time.perf_counter() - start})
    add_significance(rows, args.tag, args.significance_permutations)
    rows = [relative_paths(r, out) for r in rows]
    with atomic_open(out / "results.json") as f:
        f.write(dumps_rows(rows) + "\n")
    print(f"\n{args.data} data: {n_corpus} passages, {n_train} train / {n_eval} held-out questions, backbone "
          f"{Path(args.backbone).name}, batch {args.batch_size}, lr {args.learning_rate}, passage length "
          f"{args.passage_max_len}, {run_device()}\n")
    print(format_table(rows))
    print("\ntop-1: " + ("a passage holding an answer ranks first" if data.answers is not None
                          else "a relevant passage ranks first") +
          f" (% of the {n_eval} held-out questions). Δ, wins/losses and p (paired randomization test, two-sided) "
          "compare each row with the dpr row of the same training ('vs').")
    print("\n".join(describe_systems(rows, args.tag)))
    print(f"\ntotal wall time {time.perf_counter() - total:.0f} s; results in {out / 'results.json'}")
    print("\n".join(api_hint(out, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
