"""Throughput of the full-scale recipes' models at the recipes' shapes, measured on this machine, for the plans.

``recipes/plan.py`` prices training, encoding and doc2query generation from this bench's JSON only: every rate
is one measured here, on the hardware the JSON names, with the command below; a device not measured (no GPU
lent to the session that ran it) is recorded as such and the plan prints "not measured" for it, instead of
carrying a rate across models or devices by a ratio.

Models: randomly initialised bert-base-uncased (``BertConfig()``'s defaults: 12 layers x 768, 110M parameters)
and T5-base (doc2query-t5-base's architecture: 12 + 12 layers x 768, d_ff 3072), built from their configs (no
download; the cost of a step does not depend on the weights). Shapes: each distinct (query length, passage
length, group size) of the recipes' ``train`` / ``warmup`` sections, each passage length of their encoders, and
doc2query generation of ``num_queries`` queries of exactly ``max_query_length`` tokens per passage (the end token
is suppressed, so every query runs to its full length: an upper bound on time for real queries, which stop
earlier).

- training: examples per second of a forward + backward pass (1 query + ``group`` passages per example, mean
  pooled, in-batch softmax over the batch's passages), ``--train_batch`` examples per step;
- encoding: passages per second of a forward pass without gradients, ``--encode_batch`` passages per call;
- generation: pseudo-queries per second (top-k 10 sampling, ``--gen_input_len``-token passages).

Times are the process's CPU seconds (``time.process_time``) with ``--threads`` torch threads: on a machine shared
with other jobs, wall time would count theirs; rates are per ``--threads`` threads. With ``--device cuda`` they are
wall seconds, the GPU synchronised after each call (CPU time does not measure a GPU's work), and ``--amp bf16``
runs the models under bfloat16 autocast, as a GPU run of the recipes would (``--fp16`` / ``--bf16``). Each
measurement runs one warm-up call, then calls until ``--seconds`` have passed. Beside each rate the FLOPs per item
(training 6 x non-embedding params x tokens, a forward pass 2 x params x tokens; generation: the encoder once
per passage, the decoder per generated token) and the achieved GFLOP/s, so a rate far from what the hardware
can do shows.

    nice -n 10 python bench/throughput.py --json bench/throughput.json > bench/throughput.log 2>&1

On a GPU (``bench/device_checks.sh`` runs it so): ``python bench/throughput.py --device cuda --amp bf16
--train_batch 32 --encode_batch 256 --gen_passages 32 --seconds 5 --json throughput_gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertModel, T5Config, T5ForConditionalGeneration

ROOT = Path(__file__).resolve().parent.parent
T5_BASE = dict(d_model=768, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12, d_kv=64,
               decoder_start_token_id=0)  # t5-base's: generation starts from the pad token


def cpu_name() -> str:
    """The CPU's model name (``lscpu``'s, else the platform's)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown CPU"


def recipe_shapes(recipes: Path) -> dict:
    """The distinct training shapes (query len, passage len, group), encode lengths and generation settings."""
    train, encode, generate = set(), set(), set()
    for path in sorted(recipes.glob("*/*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        t = r.get("train", {})
        q, p, g = int(t.get("query_max_len", 32)), int(t.get("passage_max_len", 256)), int(t.get("train_group_size", 2))
        train.add((q, p, g))
        encode.add(p)
        if "warmup" in r:
            train.add((q, p, int(r["warmup"].get("train_group_size", g))))
        if "generate" in r:
            gen = r["generate"]
            generate.add((int(gen.get("num_queries", 10)), int(gen.get("max_query_length", 64))))
    return {"train": sorted(train), "encode": sorted(encode), "generate": sorted(generate)}


def params(model: torch.nn.Module, embeddings: bool) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if embeddings or "embed" not in n)


DEVICE = torch.device("cpu")  # set by --device
AMP: torch.dtype | None = None  # set by --amp
CLOCK_NAME = {"cpu": "process CPU time", "cuda": "wall time, GPU synchronised"}


def clock() -> float:
    """CPU seconds of this process on the CPU; wall seconds after the GPU's queued work on a GPU."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
        return time.perf_counter()
    return time.process_time()


def timed(call, seconds: float) -> tuple[float, int]:
    """(seconds, calls) of ``call()`` repeated until ``seconds`` have passed on :func:`clock`, after one warm-up
    call; under ``--amp``, inside bfloat16 autocast."""
    with torch.autocast(DEVICE.type, dtype=AMP, enabled=AMP is not None):
        call()
        calls, start = 0, clock()
        while True:
            call()
            calls += 1
            spent = clock() - start
            if spent >= seconds:
                return spent, calls


def random_ids(vocab: int, shape: tuple[int, int]) -> torch.Tensor:
    return torch.randint(1000, vocab, shape, device=DEVICE)


def train_rate(model: BertModel, batch: int, q_len: int, p_len: int, group: int, seconds: float) -> dict:
    vocab = model.config.vocab_size
    model.train()

    def step():
        q = random_ids(vocab, (batch, q_len))
        p = random_ids(vocab, (batch * group, p_len))
        qv = model(input_ids=q).last_hidden_state.mean(1)
        pv = model(input_ids=p).last_hidden_state.mean(1)
        torch.nn.functional.cross_entropy(qv @ pv.T, torch.arange(batch, device=DEVICE) * group).backward()
        model.zero_grad(set_to_none=True)

    spent, calls = timed(step, seconds)
    tokens = q_len + group * p_len
    flops = 6 * params(model, False) * tokens
    rate = calls * batch / spent
    return {"stage": "train", "shape": f"1 query x {q_len} + {group} passages x {p_len}", "query_len": q_len,
            "passage_len": p_len, "group": group, "batch": batch, "examples_per_s": rate,
            "flops_per_example": flops, "gflops_per_s": rate * flops / 1e9, "seconds": spent,
            "clock": CLOCK_NAME[DEVICE.type], "calls": calls}


def encode_rate(model: BertModel, batch: int, p_len: int, seconds: float) -> dict:
    vocab = model.config.vocab_size
    model.eval()

    def call():
        with torch.inference_mode():
            model(input_ids=random_ids(vocab, (batch, p_len)))

    spent, calls = timed(call, seconds)
    flops = 2 * params(model, False) * p_len
    rate = calls * batch / spent
    return {"stage": "encode", "shape": f"passages x {p_len}", "passage_len": p_len, "batch": batch,
            "passages_per_s": rate, "flops_per_passage": flops, "gflops_per_s": rate * flops / 1e9,
            "seconds": spent, "clock": CLOCK_NAME[DEVICE.type], "calls": calls}


def generate_rate(model: T5ForConditionalGeneration, passages: int, in_len: int, num_queries: int, gen_len: int,
                  seconds: float) -> dict:
    vocab = model.config.vocab_size
    model.eval()
    eos = model.config.eos_token_id

    def call():
        with torch.inference_mode():
            model.generate(input_ids=random_ids(vocab, (passages, in_len)), do_sample=True, top_k=10,
                           num_return_sequences=num_queries, max_new_tokens=gen_len, min_new_tokens=gen_len,
                           suppress_tokens=[eos], pad_token_id=model.config.pad_token_id)

    spent, calls = timed(call, seconds)
    enc = params(model.encoder, False)
    dec = params(model.decoder, False) + model.lm_head.weight.numel()
    flops_query = 2 * enc * in_len / num_queries + 2 * dec * gen_len  # the encoder runs once per passage
    rate = calls * passages * num_queries / spent
    return {"stage": "generate", "shape": f"{num_queries} queries x {gen_len} tokens from {in_len}-token passages",
            "num_queries": num_queries, "gen_len": gen_len, "input_len": in_len, "batch_passages": passages,
            "queries_per_s": rate, "flops_per_query": flops_query, "gflops_per_s": rate * flops_query / 1e9,
            "seconds": spent, "clock": CLOCK_NAME[DEVICE.type], "calls": calls}


def main() -> int:
    global DEVICE, AMP
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (rates are per this many; default 1)")
    ap.add_argument("--seconds", type=float, default=10.0, help="CPU seconds per measurement (default 10)")
    ap.add_argument("--train_batch", type=int, default=2)
    ap.add_argument("--encode_batch", type=int, default=8)
    ap.add_argument("--gen_passages", type=int, default=1)
    ap.add_argument("--gen_input_len", type=int, default=128)
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the models run (default cpu)")
    ap.add_argument("--amp", choices=["none", "bf16"], default="none", help="bfloat16 autocast (a GPU run's)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("throughput: --device cuda, but torch sees no GPU")
    DEVICE, AMP = torch.device(args.device), (torch.bfloat16 if args.amp == "bf16" else None)
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    shapes = recipe_shapes(ROOT / "recipes")
    on_gpu = DEVICE.type == "cuda"
    hardware = {"device": args.device, "name": torch.cuda.get_device_name(0) if on_gpu else cpu_name(),
                "cores_visible": os.cpu_count(), "torch_threads": args.threads, "torch": torch.__version__,
                "amp": args.amp, "clock": CLOCK_NAME[args.device]}
    gpu = f"measured on {hardware['name']}" if on_gpu else "not measured (no GPU lent in this session)"
    print(f"# command: python bench/throughput.py {' '.join(sys.argv[1:])}")
    print(f"# hardware: {hardware['name']} ({hardware['cores_visible']} CPU cores visible, shared with other jobs), "
          f"torch {torch.__version__}, {args.threads} torch thread(s), autocast {args.amp}, {hardware['clock']}; "
          f"GPU: {gpu}; load average at start {os.getloadavg()}", flush=True)
    rows = []
    bert = BertModel(BertConfig()).to(DEVICE)
    for q, p, g in shapes["train"]:
        rows.append(train_rate(bert, args.train_batch, q, p, g, args.seconds))
        print(f"bert-base train   {rows[-1]['shape']:<36} {rows[-1]['examples_per_s']:8.3f} examples/s  "
              f"{rows[-1]['flops_per_example']:.2e} FLOPs/example  {rows[-1]['gflops_per_s']:6.1f} GFLOP/s  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    for p in shapes["encode"]:
        rows.append(encode_rate(bert, args.encode_batch, p, args.seconds))
        print(f"bert-base encode  {rows[-1]['shape']:<36} {rows[-1]['passages_per_s']:8.3f} passages/s  "
              f"{rows[-1]['flops_per_passage']:.2e} FLOPs/passage  {rows[-1]['gflops_per_s']:6.1f} GFLOP/s  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    del bert
    t5 = T5ForConditionalGeneration(T5Config(**T5_BASE)).to(DEVICE)
    for n, length in shapes["generate"]:
        rows.append(generate_rate(t5, args.gen_passages, args.gen_input_len, n, length, args.seconds))
        print(f"t5-base generate  {rows[-1]['shape']:<36} {rows[-1]['queries_per_s']:8.3f} queries/s  "
              f"{rows[-1]['flops_per_query']:.2e} FLOPs/query  {rows[-1]['gflops_per_s']:6.1f} GFLOP/s  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    out = {"command": f"python bench/throughput.py {' '.join(sys.argv[1:])}", "hardware": hardware,
           "gpu": gpu,
           "models": {"bert-base": {"params": params(BertModel(BertConfig()), True)},
                      "t5-base": {"params": params(t5, True)}},
           "rows": [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}
    print(f"# load average at end {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
