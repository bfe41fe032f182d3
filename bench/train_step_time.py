"""Seconds per training step, DPR vs MVR, on the SQuAD-dev protocol (docs/data-formats.md) with all-MiniLM-L6-v2.

Converts ``squad/dev-v1.1.json`` to Tevatron train jsonl (questions of articles 0-31, one BM25 hard negative).

1. Timing (always): both models train in one process on the same batches, steps interleaved
   (DPR, MVR, DPR, MVR, ...) so background load hits both alike; prints median seconds per
   forward+backward+AdamW step, the MVR/DPR ratio and the tokens each model processes.
2. ``--finetune``: fine-tunes each model for ``--steps`` through the real train driver and prints the loss
   curve; with ``--eval`` also encodes the 2,067 paragraphs and the 3,335 held-out questions (articles 32-47)
   and reports gold-paragraph Recall@1/5/20 by exact brute-force max-sim.

    python bench/train_step_time.py --squad $DATA/squad/dev-v1.1.json --timing_steps 20
    python bench/train_step_time.py --squad $DATA/squad/dev-v1.1.json --finetune --steps 60 --eval
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import torch

from multiview_plugin.data.squad import convert_squad, write_squad_split
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.modeling import load_encoder

logging.basicConfig(level=logging.WARNING)


MODEL_FLAGS = {
    # MiniLM was trained with cosine similarity: fine-tune on normalised vectors, small temperature (docs/methods.md).
    "dpr": ["--pooling", "mean", "--normalize", "--temperature", "0.05"],
    "mvr": ["--normalize", "--temperature", "0.1", "--mvr_min_temperature", "0.03", "--mvr_num_views", "8"],
}


def interleaved_timing(args: argparse.Namespace, data: dict) -> None:
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.cli import parse_dataclasses
    from multiview_plugin.data.dataset import TrainCollator, TrainDataset, load_train_records
    from multiview_plugin.registry import get_encoder_class

    records = load_train_records(str(data["train"]))
    dataset = TrainDataset(records, group_size=2, seed=42)
    models, optims, collators = {}, {}, {}
    for name in ("dpr", "mvr"):
        margs, dargs = parse_dataclasses((ModelArguments, DataArguments), [
            "--model_name", name, "--model_name_or_path", "sentence-transformers/all-MiniLM-L6-v2",
            "--passage_max_len", str(args.passage_max_len), "--query_max_len", "32",
            "--pad_to_multiple_of", str(args.pad_to_multiple_of), *MODEL_FLAGS[name]])
        torch.manual_seed(0)
        models[name] = get_encoder_class(name).build(margs, dargs).train()
        optims[name] = torch.optim.AdamW(models[name].parameters(), lr=2e-5)
        collators[name] = TrainCollator(models[name].formatter)
    times = {n: [] for n in models}
    tokens = {n: 0 for n in models}
    for step in range(args.timing_steps + 2):
        features = [dataset[(step * args.batch_size + i) % len(dataset)] for i in range(args.batch_size)]
        for name, model in models.items():
            batch = collators[name](features)
            start = time.perf_counter()
            loss = model(query=batch["query"], passage=batch["passage"]).loss
            loss.backward()
            optims[name].step()
            optims[name].zero_grad(set_to_none=True)
            if step >= 2:  # two warm-up steps
                times[name].append(time.perf_counter() - start)
                tokens[name] += int(batch["passage"]["input_ids"].numel() + batch["query"]["input_ids"].numel())
    med = {n: statistics.median(t) for n, t in times.items()}
    print(f"\ninterleaved timing, {args.timing_steps} steps each, batch {args.batch_size} queries x group 2, "
          f"passage_max_len {args.passage_max_len}, pad_to_multiple_of {args.pad_to_multiple_of}, "
          f"torch threads {torch.get_num_threads()}")
    for name in models:
        print(f"{name:4} median {med[name]:.3f} s/step (min {min(times[name]):.3f}, max {max(times[name]):.3f}); "
              f"padded tokens per step {tokens[name] / args.timing_steps:.0f}")
    print(f"MVR / DPR seconds per step: {med['mvr'] / med['dpr']:.3f}; "
          f"tokens: {tokens['mvr'] / tokens['dpr']:.3f}")


def train(name: str, args: argparse.Namespace, data: dict, extra: list[str]) -> dict:
    out = args.work_dir / name
    argv = ["--model_name", name, "--model_name_or_path", "sentence-transformers/all-MiniLM-L6-v2",
            "--dataset_path", str(data["train"]), "--output_dir", str(out), "--overwrite_output_dir",
            "--max_steps", str(args.steps), "--per_device_train_batch_size", str(args.batch_size),
            "--train_group_size", "2", "--query_max_len", "32", "--passage_max_len", str(args.passage_max_len),
            "--learning_rate", "2e-5", "--logging_steps", "10", "--save_strategy", "no", "--report_to", "none",
            "--seed", "42", "--dataloader_num_workers", "0", "--disable_tqdm", "true", *extra]
    start = time.perf_counter()
    assert train_main(argv) == 0
    wall = time.perf_counter() - start
    state = json.loads((out / "trainer_state.json").read_text())
    runtime = next(h["train_runtime"] for h in state["log_history"] if "train_runtime" in h)
    losses = [(h["step"], round(h["loss"], 4)) for h in state["log_history"] if "loss" in h]
    return {"model": name, "dir": out, "sec_per_step": runtime / args.steps, "wall": wall, "losses": losses}


@torch.no_grad()
def recall(model_dir: Path, data: dict, batch: int = 64) -> dict:
    model = load_encoder(model_dir).eval()
    f = model.formatter
    corpus = [json.loads(x) for x in data["corpus"].read_text().splitlines()]
    texts = [(c["title"] + " " + c["text"]).strip() for c in corpus]
    docids = [c["docid"] for c in corpus]
    p_reps, p_mask = [], []
    for i in range(0, len(texts), batch):
        r, m = model.encode_passage(f.passages(texts[i:i + batch]))
        p_reps.append(r)
        p_mask.append(m)
    p_reps, p_mask = torch.cat(p_reps), torch.cat(p_mask)
    queries = [json.loads(x) for x in data["eval_queries"].read_text().splitlines()]
    gold = {}
    for line in data["eval_qrels"].read_text().splitlines():
        qid, _, docid, _ = line.split()
        gold[qid] = docid
    hits = {1: 0, 5: 0, 20: 0}
    for i in range(0, len(queries), batch):
        chunk = queries[i:i + batch]
        q = model.encode_query(f.queries([x["query"] for x in chunk]))
        top = model.compute_similarity(q, p_reps, p_mask).topk(20, dim=1).indices
        for row, x in zip(top.tolist(), chunk):
            ranked = [docids[j] for j in row]
            for k in hits:
                hits[k] += gold[x["query_id"]] in ranked[:k]
    return {f"R@{k}": round(100 * v / len(queries), 1) for k, v in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--squad", type=Path, default=Path("../shared/data/squad/dev-v1.1.json"),
                        help="SQuAD v1.1 dev json")
    parser.add_argument("--work_dir", type=Path, default=Path("runs/bench_train"), help="where models are written")
    parser.add_argument("--timing_steps", type=int, default=20, help="timed steps per model (interleaved)")
    parser.add_argument("--finetune", action="store_true", help="also fine-tune both through the driver")
    parser.add_argument("--steps", type=int, default=60, help="--finetune: training steps per model")
    parser.add_argument("--batch_size", type=int, default=16, help="queries per step (each with 2 passages)")
    parser.add_argument("--passage_max_len", type=int, default=192, help="passage positions (the results' 192)")
    parser.add_argument("--pad_to_multiple_of", type=int, default=0,
                        help="timing: batch padding multiple for both models (0 = none, the CPU default; "
                        "16 = Tevatron's GPU default)")
    parser.add_argument("--eval", action="store_true", help="also report held-out gold-paragraph recall")
    args = parser.parse_args()

    data = write_squad_split(convert_squad(args.squad), args.work_dir / "data")
    n_train = sum(1 for _ in data["train"].open())
    print(f"SQuAD-dev protocol: {n_train} train questions (articles 0-31), torch threads {torch.get_num_threads()}")
    interleaved_timing(args, data)
    if not args.finetune:
        return
    runs = [train(name, args, data, flags) for name, flags in MODEL_FLAGS.items()]
    print(f"\n{'model':6} {'s/step':>8} {'wall s':>8}  loss (step, value)")
    for r in runs:
        print(f"{r['model']:6} {r['sec_per_step']:8.2f} {r['wall']:8.1f}  {r['losses']}")
    print(f"\nMVR / DPR seconds per step: {runs[1]['sec_per_step'] / runs[0]['sec_per_step']:.3f} "
          f"(batch {args.batch_size} x group 2, passage_max_len {args.passage_max_len}, {args.steps} steps)")
    if args.eval:
        for r in runs:
            print(f"{r['model']}: held-out gold-paragraph recall {recall(r['dir'], data)}")


if __name__ == "__main__":
    main()
