"""Gradient cache (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup")
for every method, multi-vector ones included.

A contrastive loss needs the whole batch's vectors at once, but the encoders' activations need not be kept for
all of them: (1) encode the batch chunk by chunk without gradients; (2) compute the loss on the cached vectors
(queries (B, D), passages (P, K, D) with their view mask) and its gradients with respect to them; (3) re-encode
each chunk with gradients and backpropagate the cached vector gradients through it. Dropout replays the same
random state in (3) as in (1), so the parameter gradients equal those of one big batch while the activation
memory is that of one chunk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from multiview_plugin.errors import ConfigError


def split_batch(batch: dict[str, torch.Tensor], chunk_size: int) -> list[dict[str, torch.Tensor]]:
    """Row chunks of a tokenised batch (every tensor is split along its first dimension; a 0-d tensor, such as
    residual MVR's ``num_text_tokens``, holds for the whole batch and goes to every chunk)."""
    if chunk_size < 1:
        raise ConfigError(f"--gc_q_chunk_size/--gc_p_chunk_size must be >= 1, got {chunk_size}")
    rows = {k: v.shape[0] for k, v in batch.items() if v.dim() > 0}
    if len(set(rows.values())) != 1:
        raise ConfigError(f"--grad_cache cannot split this batch: its tensors have different numbers of rows {rows}")
    n = next(iter(rows.values()))
    return [{k: v[i:i + chunk_size] if v.dim() > 0 else v for k, v in batch.items()} for i in range(0, n, chunk_size)]


class RandState:
    """The CPU (and current CUDA device's) random state at creation, restorable later to replay dropout."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        devices = [torch.cuda.current_device()] if self.cuda is not None else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu)
            if self.cuda is not None:
                torch.cuda.set_rng_state(self.cuda)
            yield


def _cat_views(reps: list[torch.Tensor], masks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate (n, K_i, D) chunks, padding the view axis to the largest K_i (masked out)."""
    width = max(r.shape[1] for r in reps)
    padded = [torch.nn.functional.pad(r, (0, 0, 0, width - r.shape[1])) for r in reps]
    masks = [torch.nn.functional.pad(m, (0, width - m.shape[1]), value=False) for m in masks]
    return torch.cat(padded), torch.cat(masks)


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model


def grad_cache_step(model: nn.Module, inputs: dict[str, Any], q_chunk_size: int, p_chunk_size: int,
                    backward: Callable[[torch.Tensor], None] | None = None) -> Any:
    """One training step's forward and backward with gradient caching; returns the model's
    :class:`~multiview_plugin.modeling.base.EncoderOutput` (loss and parts, detached).

    ``model`` is the encoder, possibly DDP-wrapped (chunks go through its ``forward`` so DDP sees them, and
    only the last chunk syncs gradients); ``inputs`` the collator's batch (``query``, ``passage`` and any extra
    tensors the method's loss takes, such as dcsr's ``sentence_selection``); ``backward`` runs the loss's backward
    (default ``loss.backward()``; the trainer passes its accelerator's, which applies loss scaling).
    """
    backward = backward or (lambda loss: loss.backward())
    extra = {k: v for k, v in inputs.items() if k not in ("query", "passage")}
    q_chunks = split_batch(inputs["query"], q_chunk_size)
    p_chunks = split_batch(inputs["passage"], p_chunk_size)

    # 1. vectors of every chunk, no activations kept
    q_states, p_states, q_reps, p_reps, p_masks = [], [], [], [], []
    with torch.no_grad():
        for chunk in q_chunks:
            q_states.append(RandState())
            q_reps.append(model(query=chunk).q_reps)
        for chunk in p_chunks:
            p_states.append(RandState())
            out = model(passage=chunk)
            p_reps.append(out.p_reps)
            p_masks.append(out.p_mask)

    # 2. the loss on the cached vectors, and its gradients with respect to them
    q_all = torch.cat(q_reps).detach().requires_grad_()
    p_all, p_mask = _cat_views(p_reps, p_masks)
    p_all = p_all.detach().requires_grad_()
    out = _unwrap(model).loss_from_reps(q_all, p_all, p_mask, **extra)
    backward(out.loss)

    # 3. re-encode chunk by chunk with gradients, pushing the cached vector gradients into the weights
    no_sync = getattr(model, "no_sync", None)
    q_grads = q_all.grad.split(q_chunk_size)
    p_grads = p_all.grad.split(p_chunk_size)
    jobs = [("query", c, s, g) for c, s, g in zip(q_chunks, q_states, q_grads)]
    jobs += [("passage", c, s, g) for c, s, g in zip(p_chunks, p_states, p_grads)]
    for i, (side, chunk, state, grad) in enumerate(jobs):
        sync = no_sync() if no_sync is not None and i < len(jobs) - 1 else contextlib.nullcontext()
        with sync, state.replay():
            enc = model(**{side: chunk})
            reps = enc.q_reps if side == "query" else enc.p_reps
            torch.autograd.backward(reps, grad[:, :reps.shape[1]] if side == "passage" else grad)
    out.loss = out.loss.detach()
    out.q_reps, out.p_reps = q_all.detach(), p_all.detach()
    return out
