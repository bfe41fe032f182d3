"""Run under ``torchrun --nproc_per_node 2``: cross-process in-batch negatives equal one big batch.

Each process encodes half the batch with ``negatives_x_device``; after DDP-style gradient averaging, the loss
and every gradient must equal a single process computing the whole batch. Exits non-zero on mismatch.
"""

import sys

import torch
import torch.distributed as dist

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.registry import get_encoder_class

QUERIES = ["what is paris", "what is the moon", "where is rome", "what is a cat"]
PASSAGES = ["paris is the capital of france", "london is a city", "the moon is a small planet", "the sun",
            "rome is the capital of italy", "berlin", "a cat is a small animal", "a tree is green"]


def build(model_name: str, path: str):
    torch.manual_seed(0)
    model = get_encoder_class(model_name).build(
        ModelArguments(model_name_or_path=path, model_name=model_name, mvr_num_views=3, temperature=0.5),
        DataArguments(pad_to_multiple_of=None))
    for m in model.modules():  # deterministic forward passes
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model.train()


def main(path: str, model_name: str) -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2

    model = build(model_name, path)
    model.negatives_x_device = True
    f = model.formatter
    half = len(QUERIES) // world
    # rank 1 gets the longer passages too, so the padded lengths differ between processes
    q = f.queries(QUERIES[rank * half:(rank + 1) * half])
    p = f.passages(PASSAGES[rank * 2 * half:(rank + 1) * 2 * half])
    out = model(query=q, passage=p)
    assert out.q_reps.shape[0] == len(QUERIES) and out.p_reps.shape[0] == len(PASSAGES), "not gathered"
    out.loss.backward()
    for param in model.parameters():  # what DDP does: average gradients
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= world

    reference = build(model_name, path)
    ref = reference(query=f.queries(QUERIES), passage=f.passages(PASSAGES))
    ref.loss.backward()

    ok = torch.allclose(out.loss / world, ref.loss, atol=1e-6)
    worst = 0.0
    for a, b in zip(model.parameters(), reference.parameters()):
        if b.grad is None:
            continue
        worst = max(worst, float((a.grad - b.grad).abs().max()))
        ok &= torch.allclose(a.grad, b.grad, atol=1e-5, rtol=1e-4)
    print(f"rank {rank}: loss {float(out.loss) / world:.6f} vs {float(ref.loss):.6f}, max grad diff {worst:.2e}, "
          f"{'OK' if ok else 'MISMATCH'}")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
