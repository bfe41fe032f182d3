"""Encoding throughput MVR vs DPR (docs/s, same corpus, same backbone), and memory growth with corpus size.

1. Throughput: both models built from the backbone (all-MiniLM-L6-v2 by default) encode the same passages
   (SQuAD paragraphs when --squad is given, else the quickstart corpus) through ``encode_to_shard``,
   interleaved in rounds so background load hits both alike.
2. Memory: ``encode_to_shard`` runs in fresh subprocesses on 2k and on 20k synthetic docs with a 1-layer
   random BERT of width 384 and 8 views (the MVR/MiniLM output size), sampling the process's anonymous
   resident memory (RssAnon) and peak RSS (VmHWM). Bounded streaming means the growth from 2k to 20k docs
   stays far below the 20k-doc shard's size.

    python bench/encode_throughput.py --squad $DATA/squad/dev-v1.1.json --docs 512
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.cli import parse_dataclasses
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.registry import get_encoder_class

MEMORY_CHILD = r"""
import json, sys, threading, time, tempfile
from pathlib import Path
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast
sys.path.insert(0, sys.argv[3])
from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.registry import get_encoder_class

n_docs, work = int(sys.argv[1]), Path(sys.argv[2])
peak = {"anon": 0}
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
def sample():
    while True:
        peak["anon"] = max(peak["anon"], status("RssAnon:"))
        time.sleep(0.02)
model_dir = work / "model"
if not (model_dir / "config.json").exists():
    words = [f"w{i}" for i in range(500)]
    (work / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    BertTokenizerFast(str(work / "vocab.txt")).save_pretrained(model_dir)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=505, hidden_size=384, num_hidden_layers=1, num_attention_heads=6,
                         intermediate_size=384)).save_pretrained(model_dir)
corpus = work / f"corpus{n_docs}.jsonl"
with corpus.open("w") as f:
    for i in range(n_docs):
        f.write(json.dumps({"docid": f"d{i}", "text": " ".join(f"w{(i * 7 + j) % 500}" for j in range(60))}) + "\n")
model = get_encoder_class("mvr").build(ModelArguments(model_name_or_path=str(model_dir), model_name="mvr"),
                                       DataArguments(passage_max_len=64)).eval()
threading.Thread(target=sample, daemon=True).start()
time.sleep(0.1)
base = status("RssAnon:")
encode_to_shard(model, str(corpus), work / f"out{n_docs}.pkl", batch_size=64, overwrite=True)
time.sleep(0.1)
print(json.dumps({"docs": n_docs, "anon_base_kb": base, "anon_peak_kb": peak["anon"],
                  "vmhwm_kb": status("VmHWM:"), "shard_bytes": (work / f"out{n_docs}.pkl").stat().st_size}))
"""


def throughput(args: argparse.Namespace) -> None:
    if args.squad:
        from multiview_plugin.data.squad import convert_squad, write_squad_split

        corpus = write_squad_split(convert_squad(args.squad), Path(args.work_dir) / "squad")["corpus"]
    else:
        from multiview_plugin.quickstart.dataset import build_quickstart_data, write_quickstart_data

        corpus = write_quickstart_data(build_quickstart_data(), Path(args.work_dir) / "qs")["corpus"]
    lines = Path(corpus).read_text().splitlines()[: args.docs]
    small = Path(args.work_dir) / "throughput_corpus.jsonl"
    small.write_text("\n".join(lines) + "\n")
    models = {}
    for name, flags in {"dpr": ["--pooling", "mean", "--normalize"], "mvr": ["--normalize"]}.items():
        margs, dargs = parse_dataclasses((ModelArguments, DataArguments), [
            "--model_name", name, "--model_name_or_path", args.backbone, "--passage_max_len",
            str(args.passage_max_len), *flags])
        models[name] = get_encoder_class(name).build(margs, dargs).eval()
    seconds = {n: 0.0 for n in models}
    for r in range(args.rounds):
        for name, model in models.items():
            start = time.perf_counter()
            encode_to_shard(model, str(small), Path(args.work_dir) / f"{name}.{r}.pkl", batch_size=32,
                            overwrite=True)
            seconds[name] += time.perf_counter() - start
    n = len(lines) * args.rounds
    rate = {k: n / v for k, v in seconds.items()}
    print(f"encoding {len(lines)} passages x {args.rounds} rounds, backbone {Path(args.backbone).name}, "
          f"passage_max_len {args.passage_max_len}, torch threads {torch.get_num_threads()}")
    for name in models:
        print(f"{name}: {rate[name]:.1f} docs/s")
    print(f"MVR / DPR encoding throughput: {rate['mvr'] / rate['dpr']:.3f} (target >= 0.9)")


def memory(args: argparse.Namespace) -> None:
    repo = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as work:
        results = []
        for n_docs in (2000, 20000):
            out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(n_docs), work, repo], check=True,
                                 capture_output=True, text=True)
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    small, large = results
    growth_anon = (large["anon_peak_kb"] - small["anon_peak_kb"]) / 1024
    growth_hwm = (large["vmhwm_kb"] - small["vmhwm_kb"]) / 1024
    shard_mb = large["shard_bytes"] / 2**20
    print("\nmemory, MVR 8 views x dim 384 (1-layer random BERT), batch 64:")
    for r in results:
        print(f"{r['docs']:>6} docs: peak RssAnon {r['anon_peak_kb'] / 1024:.0f} MiB, peak RSS (VmHWM) "
              f"{r['vmhwm_kb'] / 1024:.0f} MiB, shard {r['shard_bytes'] / 2**20:.1f} MiB")
    print(f"growth 2k -> 20k docs: RssAnon {growth_anon:+.0f} MiB, VmHWM {growth_hwm:+.0f} MiB; "
          f"the 20k shard itself is {shard_mb:.0f} MiB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squad", help="SQuAD v1.1 dev json (its paragraphs are the corpus); default: quickstart")
    p.add_argument("--backbone", default="sentence-transformers/all-MiniLM-L6-v2")
    p.add_argument("--docs", type=int, default=512, help="passages encoded per round")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds per model")
    p.add_argument("--passage_max_len", type=int, default=192)
    p.add_argument("--work_dir", default=tempfile.mkdtemp(prefix="encode_bench_"))
    p.add_argument("--skip_memory", action="store_true", help="only the throughput part")
    args = p.parse_args()
    throughput(args)
    if not args.skip_memory:
        memory(args)


if __name__ == "__main__":
    main()
