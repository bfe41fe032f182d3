"""Peak memory of one training step with and without ``--grad_cache``, at the papers' batch size (128 queries).

Each (method, mode) runs in a fresh process (so peaks do not mix): it builds the model and the batch, then takes
one forward+backward step, and reports the step's peak memory above what was in use before it (CUDA: peak
allocated bytes; CPU: growth of the process's peak resident set) and the loss. Dropout is off, so both modes must
give the same loss.

    python bench/grad_cache_memory.py                       # batch 128 x group 2, small random BERT, CPU
    python bench/grad_cache_memory.py --backbone minilm --passage_max_len 128 --device cuda
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tools/


def one_step(args: argparse.Namespace) -> dict:
    import torch

    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.data.dataset import TrainCollator
    from multiview_plugin.registry import get_encoder_class
    from multiview_plugin.training.grad_cache import grad_cache_step
    from tools.testing import WORDS

    torch.manual_seed(0)
    rng = random.Random(0)
    model = get_encoder_class(args.method).build(
        ModelArguments(model_name_or_path=args.backbone, model_name=args.method, mvr_num_views=8),
        DataArguments(passage_max_len=args.passage_max_len, pad_to_multiple_of=None))
    # Dropout off so the two modes' losses compare exactly (with dropout, each chunk draws its own masks)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    device = torch.device(args.device)
    model.to(device).train()
    features = [{"query": " ".join(rng.choices(WORDS, k=12)),
                 "passages": [" ".join(rng.choices(WORDS, k=args.passage_max_len)) for _ in range(args.group_size)]}
                for _ in range(args.batch_size)]
    batch = TrainCollator(model.formatter)(features)
    batch = {k: {n: t.to(device) for n, t in v.items()} for k, v in batch.items()}
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.mode == "gc":
        loss = grad_cache_step(model, batch, args.q_chunk, args.p_chunk).loss
    else:
        out = model(**batch)
        out.loss.backward()
        loss = out.loss
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {"peak_mib": peak / 2**20, "loss": float(loss)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default="dpr,mvr")
    p.add_argument("--backbone", help="Backbone (default: a random 4-layer, 256-dim BERT built here).")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--group_size", type=int, default=2)
    p.add_argument("--passage_max_len", type=int, default=128)
    p.add_argument("--q_chunk", type=int, default=16)
    p.add_argument("--p_chunk", type=int, default=16)
    p.add_argument("--device", default="cpu")
    p.add_argument("--method", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode:  # a child: one measurement, printed as json
        print(json.dumps(one_step(args)))
        return
    tmp = tempfile.TemporaryDirectory()
    if not args.backbone:
        from tools.testing import make_tiny_bert

        args.backbone = str(make_tiny_bert(Path(tmp.name) / "bert", hidden=256, layers=4))
    print(f"batch {args.batch_size} queries x {args.group_size} passages of {args.passage_max_len} tokens, "
          f"chunks q={args.q_chunk} p={args.p_chunk}, backbone {args.backbone}, {args.device}")
    print(f"{'method':8} {'peak, no cache (MiB)':>21} {'peak, grad cache (MiB)':>23} {'ratio':>7} {'|loss diff|':>12}")
    for method in args.methods.split(","):
        res = {}
        for mode in ("plain", "gc"):
            cmd = [sys.executable, __file__, "--method", method, "--mode", mode, "--backbone", args.backbone,
                   "--batch_size", str(args.batch_size), "--group_size", str(args.group_size), "--passage_max_len",
                   str(args.passage_max_len), "--q_chunk", str(args.q_chunk), "--p_chunk", str(args.p_chunk),
                   "--device", args.device]
            res[mode] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                                   .strip().splitlines()[-1])
        plain, gc = res["plain"], res["gc"]
        print(f"{method:8} {plain['peak_mib']:21.0f} {gc['peak_mib']:23.0f} {plain['peak_mib'] / gc['peak_mib']:7.1f}"
              f" {abs(plain['loss'] - gc['loss']):12.2e}")


if __name__ == "__main__":
    main()
