"""Cross-process in-batch negatives (``--negatives_x_device``)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _pad_to(t: torch.Tensor, sizes: tuple[int, ...], value: float | bool) -> torch.Tensor:
    pad: list[int] = []
    for dim in reversed(range(t.dim())):
        pad.extend([0, sizes[dim] - t.shape[dim]])
    return F.pad(t, pad, value=value) if any(pad) else t


def gather_across_processes(reps: torch.Tensor, mask: torch.Tensor | None = None):
    """Concatenate ``reps`` (and ``mask``) from every process along dim 0, keeping this process's gradient.

    Other processes' tensors arrive without gradient; this process's own slice is the original tensor, so
    its gradient flows (Tevatron's scheme; the caller multiplies the loss by the world size). Sizes may
    differ across processes in dim 0 and 1 (e.g. a variable number of views): tensors are padded to the
    largest size for the exchange, and padded views get mask False.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    local_shape = torch.tensor(reps.shape, device=reps.device)
    shapes = [torch.zeros_like(local_shape) for _ in range(world)]
    dist.all_gather(shapes, local_shape)
    max_shape = tuple(int(x) for x in torch.stack(shapes).max(dim=0).values)
    if mask is None and reps.dim() == 3:
        mask = torch.ones(reps.shape[:2], dtype=torch.bool, device=reps.device)

    def exchange(t: torch.Tensor, sizes: tuple[int, ...], value) -> list[torch.Tensor]:
        padded = _pad_to(t.contiguous(), sizes, value)
        buffers = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(buffers, padded)
        out = []
        for r, buf in enumerate(buffers):
            n = int(shapes[r][0])
            out.append(buf[:n])
        out[rank] = _pad_to(t, (int(shapes[rank][0]),) + sizes[1:], value)
        return out

    gathered = torch.cat(exchange(reps, max_shape, 0.0))
    if mask is None:
        return gathered
    # gloo cannot all_gather bool tensors: exchange the mask as uint8.
    gathered_mask = torch.cat(exchange(mask.to(torch.uint8), max_shape[: mask.dim()], 0)).bool()
    return gathered, gathered_mask
