"""Per-core costs of the full-scale backbones, measured here, for the recipes' plans (``recipes/plan.py``).

The committed GPU runs (``results/logs/squad-gpu20-*.log``, records ``results/squad/squad-gpu20-*.json``) train
and encode all-MiniLM-L6-v2 (6 layers, 384 dims) at batch 64 × (1 query of 32 + 2 passages of 192 tokens); the
papers' recipes train bert-base-uncased (12 layers, 768 dims) at 256 (NQ) or 128 (MS MARCO) tokens and generate
pseudo-queries with doc2query-t5-base. This bench measures, on one CPU thread with randomly initialised models of
those architectures (the cost does not depend on the weights), in one run:

- training: seconds per example of a forward + backward pass (1 query of ``--query_len`` + ``--group`` passages
  of ``--passage_len``), bert-base at each recipe's passage length, MiniLM-L6 at the GPU runs' 192; the ratio
  bert-base / MiniLM per example is what the plans multiply the GPU runs' measured seconds per example by;
- encoding: passages per second of a forward pass (no gradients), bert-base at each recipe length and MiniLM-L6
  at 192 (ratio as above);
- generation: seconds per passage of T5-base (doc2query-t5-base's architecture) sampling ``--num_queries`` queries
  of up to ``--gen_len`` tokens with top-k 10 from a ``--gen_input_len``-token passage. Random weights rarely
  emit the end token, so every query runs to ``--gen_len`` tokens: an upper bound for real queries.

Times are the process's CPU seconds (``time.process_time``, one torch thread: wall time on a shared machine
would count the other jobs). Interleaved repeats (``--repeats``), median. CPU ratios are an upper bound for a
GPU, where the small MiniLM leaves more of the device idle than bert-base does.

    nice -n 10 python bench/pipeline_costs.py --json bench/pipeline_costs.json > bench/pipeline_costs.log 2>&1
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

import torch
from transformers import BertConfig, BertModel, T5Config, T5ForConditionalGeneration

MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)  # L6-H384
BERT_BASE: dict = {}  # BertConfig()'s defaults are bert-base-uncased's (12 x 768, 3072, vocab 30522)


def bert(kind: dict) -> BertModel:
    model = BertModel(BertConfig(**kind))
    return model


def train_step_s(model: BertModel, examples: int, query_len: int, group: int, passage_len: int) -> float:
    """One forward + backward of ``examples`` queries and ``examples × group`` passages (mean-pooled, dot loss)."""
    model.train()
    vocab = model.config.vocab_size
    q = torch.randint(1000, vocab, (examples, query_len))
    p = torch.randint(1000, vocab, (examples * group, passage_len))
    start = time.process_time()
    qv = model(input_ids=q).last_hidden_state.mean(1)
    pv = model(input_ids=p).last_hidden_state.mean(1)
    loss = torch.nn.functional.cross_entropy(qv @ pv.T, torch.arange(examples) * group)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.process_time() - start


@torch.no_grad()
def encode_s(model: BertModel, passages: int, passage_len: int) -> float:
    model.eval()
    p = torch.randint(1000, model.config.vocab_size, (passages, passage_len))
    start = time.process_time()
    model(input_ids=p)
    return time.process_time() - start


@torch.no_grad()
def generate_s(model: T5ForConditionalGeneration, input_len: int, num_queries: int, gen_len: int) -> float:
    model.eval()
    x = torch.randint(100, model.config.vocab_size, (1, input_len))
    start = time.process_time()
    model.generate(input_ids=x, do_sample=True, top_k=10, num_return_sequences=num_queries, max_new_tokens=gen_len,
                   min_new_tokens=gen_len)
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--examples", type=int, default=2, help="training examples per measured step")
    p.add_argument("--query_len", type=int, default=32)
    p.add_argument("--group", type=int, default=2, help="passages per query (the recipes' train_group_size)")
    p.add_argument("--passage_lens", type=int, nargs="+", default=[256, 128], help="bert-base passage lengths "
                   "(nq/triviaqa/squad/beir recipes 256, msmarco 128)")
    p.add_argument("--minilm_len", type=int, default=192, help="the GPU runs' passage_max_len")
    p.add_argument("--encode_batch", type=int, default=8)
    p.add_argument("--num_queries", type=int, default=10)
    p.add_argument("--gen_len", type=int, default=64)
    p.add_argument("--gen_input_len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default="bench/pipeline_costs.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    command = "python bench/pipeline_costs.py " + " ".join(sys.argv[1:])
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# command: {command}\n# git {git}; torch {torch.__version__}; {os.cpu_count()} CPUs (shared), torch "
          f"threads {args.threads}; load average {os.getloadavg()}", flush=True)
    models = {"bert-base": bert(BERT_BASE), "minilm-l6": bert(MINILM)}
    t5 = T5ForConditionalGeneration(T5Config(d_model=768, d_ff=3072, num_layers=12, num_heads=12, d_kv=64,
                                                     decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    shapes = [("bert-base", L) for L in args.passage_lens] + [("minilm-l6", args.minilm_len)]
    train = {s: [] for s in shapes}
    enc = {s: [] for s in shapes}
    gen = []
    for name, _ in shapes:  # warm-up (allocations, kernels)
        train_step_s(models[name], 1, 8, 1, 16)
        encode_s(models[name], 1, 16)
    generate_s(t5, 8, 1, 2)
    for r in range(args.repeats):  # interleaved: load changes hit every shape alike
        for name, L in shapes:
            train[(name, L)].append(train_step_s(models[name], args.examples, args.query_len, args.group, L)
                                    / args.examples)
            enc[(name, L)].append(encode_s(models[name], args.encode_batch, L) / args.encode_batch)
        gen.append(generate_s(t5, args.gen_input_len, args.num_queries, args.gen_len))
        print(f"repeat {r + 1}/{args.repeats} done; load average {os.getloadavg()}", flush=True)
    out = {"command": command, "git": git, "threads": args.threads, "train_s_per_example": {},
           "encode_s_per_passage": {}, "ratio_train_per_example": {}, "ratio_encode_per_passage": {}}
    base = ("minilm-l6", args.minilm_len)
    print(f"\n1 CPU thread, median of {args.repeats}:")
    for name, L in shapes:
        key = f"{name}@{L}"
        out["train_s_per_example"][key] = statistics.median(train[(name, L)])
        out["encode_s_per_passage"][key] = statistics.median(enc[(name, L)])
        print(f"  {key:14s} train {out['train_s_per_example'][key]:.3f} s/example (1 query x {args.query_len} + "
              f"{args.group} passages x {L})   encode {1 / out['encode_s_per_passage'][key]:.2f} passages/s")
    for name, L in shapes:
        if (name, L) == base:
            continue
        key = f"{name}@{L}"
        rt = out["train_s_per_example"][key] / out["train_s_per_example"][f"minilm-l6@{args.minilm_len}"]
        re = out["encode_s_per_passage"][key] / out["encode_s_per_passage"][f"minilm-l6@{args.minilm_len}"]
        out["ratio_train_per_example"][key] = rt
        out["ratio_encode_per_passage"][key] = re
        print(f"  {key} / minilm-l6@{args.minilm_len}: training {rt:.2f}x per example, encoding {re:.2f}x per passage")
    out["generate_s_per_passage"] = statistics.median(gen)
    out["generate"] = {"model": "t5-base architecture (doc2query-t5-base)", "num_queries": args.num_queries,
                       "gen_len": args.gen_len, "input_len": args.gen_input_len, "top_k": 10}
    print(f"  t5-base generation: {out['generate_s_per_passage']:.2f} s per passage ({args.num_queries} queries x "
          f"{args.gen_len} tokens, top-k 10, input {args.gen_input_len} tokens)")
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
