"""Quickstart: a real train → encode → index → search → evaluate run (MiniLM zero-shot, DPR, two multi-view models).

    python -m multiview_plugin.quickstart                       # embedded dataset, a few minutes on 2 CPU cores
    python -m multiview_plugin.quickstart --data squad --squad_path $DATA/squad/dev-v1.1.json --steps 100

The embedded dataset (``multiview_plugin/quickstart/dataset.py``) is generated for this project: passages about
fictional entities, each stating several facts, with questions that each target a different fact, so a
passage is asked about from several "views". ``--data squad`` runs the SQuAD-dev protocol instead
(docs/data-formats.md, docs/results.md).
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
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.atomic import atomic_open
from multiview_plugin.cli import cli, parse_dataclasses, setup_logging
from multiview_plugin.data.answers import load_answers
from multiview_plugin.data.readers import load_corpus, load_qrels, load_queries
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.encoding.shard_sets import load_query_reps
from multiview_plugin.encoding.shards import read_shard, split_lookup
from multiview_plugin.evaluation.answers import build_retrieval, retrieval_accuracy
from multiview_plugin.evaluation.metrics import evaluate_run
from multiview_plugin.evaluation.runs import to_run, write_run
from multiview_plugin.modeling import load_encoder
from multiview_plugin.quickstart.options import BM25, SYSTEMS, build_parser, train_seed
from multiview_plugin.records import dumps_rows
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.scoring import local_variation, view_perplexity
from multiview_plugin.search import MultiVectorSearcher, build_index

logger = logging.getLogger("multiview_plugin.quickstart")



def prepare_data(args: argparse.Namespace, data_dir: Path) -> dict[str, Path]:
    if args.data == "default":
        from multiview_plugin.quickstart.dataset import build_quickstart_data, write_quickstart_data

        sizes = {} if args.num_entities is None else {"num_entities": args.num_entities}
        try:
            data = build_quickstart_data(**sizes)
        except ValueError as e:
            raise SystemExit(f"error: --num_entities: {e}") from None
        files = write_quickstart_data(data, data_dir)
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


def add_significance(rows: list[dict], baseline: str, num_permutations: int = 10_000, seed: int = 0) -> None:
    """Give every row with per-question outcomes a paired test of its top-1 hits against ``baseline``'s row
    (the same run, so the same questions): ``p_value`` (paired randomization), ``p_value_ttest``, ``p_test``,
    ``p_baseline``. Rows of runs without the baseline get none."""
    from multiview_plugin.evaluation.significance import compare_ranks

    base = next((r for r in rows if r["system"] == baseline and "per_query" in r), None)
    if base is None:
        return
    for r in rows:
        if r is base or "per_query" not in r or r["per_query"]["outcome"] != base["per_query"]["outcome"]:
            continue
        r.update(compare_ranks(r["per_query"]["ranks"], base["per_query"]["ranks"], 1, num_permutations, seed),
                 p_baseline=baseline)


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
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


TABLE_COLUMNS = ["system", "steps", "train_s", "views_per_doc", "MRR@10", "nDCG@10", "R@1", "R@5", "R@20",
                 "answer_Top1", "answer_Top5", "answer_Top20", "PPL", "LV", "p_value"]


def view_diagnostics(shard: Path, q_reps: np.ndarray, q_ids: list[str], qrels: dict) -> dict:
    """MVR §5.2: Local Variation and view perplexity over (eval query, gold passage) pairs; {} for one view."""
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


def format_table(rows: list[dict]) -> str:
    """A Markdown table; metric values are percentages."""
    def cell(value) -> str:
        return (f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}") if isinstance(value, float) else str(value)

    lines = [" | ".join(TABLE_COLUMNS), " | ".join("---" for _ in TABLE_COLUMNS)]
    lines += [" | ".join(cell(r.get(c, "-")) for c in TABLE_COLUMNS) for r in rows]
    return "\n".join(lines)


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser(__doc__).parse_args(argv)
    if args.num_entities is not None and args.data != "default":
        raise SystemExit(f"error: --num_entities sizes the generated dataset (--data default), not --data {args.data}")
    setup_logging(logging.WARNING)
    logging.getLogger("multiview_plugin.quickstart").setLevel(logging.INFO)
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
    add_significance(rows, "dpr" + args.tag, args.significance_permutations)
    with atomic_open(out / "results.json") as f:
        f.write(dumps_rows(rows) + "\n")
    print(f"\n{args.data} data: {n_corpus} passages, {n_train} train / {n_eval} eval questions, backbone "
          f"{Path(args.backbone).name}, batch {args.batch_size}, lr {args.learning_rate}\n")
    print(format_table(rows))
    print(f"\ntotal wall time {time.perf_counter() - total:.0f} s; results in {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
