"""Tests of multiview_plugin/losses/distributed.py: in-batch negatives gathered across processes (one process
here; tests/training/test_distributed.py runs two under torchrun)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from multiview_plugin.losses.distributed import _pad_to, gather_across_processes


def test_pad_to_pads_the_trailing_sizes():
    t = torch.ones(2, 3)
    padded = _pad_to(t, (4, 5), 0.0)
    assert padded.shape == (4, 5) and padded.sum() == 6 and padded[:2, :3].eq(1).all()
    assert _pad_to(t, (2, 3), 0.0) is t
    assert _pad_to(torch.ones(1, 2, dtype=torch.bool), (1, 4), False).tolist() == [[True, True, False, False]]


@pytest.fixture
def one_process_group(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is already initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_gather_keeps_this_process_gradient_and_fills_the_mask(one_process_group):
    reps = torch.randn(2, 3, 4, requires_grad=True)
    gathered, mask = gather_across_processes(reps)
    torch.testing.assert_close(gathered, reps.detach())
    assert mask.dtype == torch.bool and mask.all() and mask.shape == (2, 3)
    gathered.sum().backward()
    torch.testing.assert_close(reps.grad, torch.ones_like(reps))
    flat = torch.randn(3, 4)
    torch.testing.assert_close(gather_across_processes(flat), flat)
