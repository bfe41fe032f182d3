"""Losses, scoring and schedules against hand-computed values."""

import math

import pytest
import torch

from multiview_plugin.losses import ContrastiveLoss, GlobalLocalLoss
from multiview_plugin.losses.temperature import temperature_at
from multiview_plugin.registry import get_loss_class
from multiview_plugin.scoring import local_variation, max_sim, view_perplexity, view_scores


def lse(*xs):
    return math.log(sum(math.exp(x) for x in xs))


# 2 queries, 3 passages with 2 views each (passage 2 has only one real view).
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
P = torch.tensor([
    [[1.0, 0.0], [0.5, 0.5]],
    [[0.0, 2.0], [1.0, 1.0]],
    [[0.2, 0.1], [9.0, 9.0]],
])
MASK = torch.tensor([[True, True], [True, True], [True, False]])


def test_view_scores_and_mask():
    s = view_scores(Q, P, MASK)
    assert s.shape == (2, 3, 2)
    assert s[0, 0].tolist() == [1.0, 0.5]
    assert s[1, 1].tolist() == [2.0, 1.0]
    assert s[0, 2, 1] == float("-inf")  # padded view never wins
    assert torch.allclose(max_sim(Q, P, MASK), torch.tensor([[1.0, 1.0, 0.2], [0.5, 2.0, 0.1]]))


def test_contrastive_loss_hand_computed():
    tau = 0.5
    target = torch.tensor([0, 1])
    out = ContrastiveLoss()(view_scores(Q, P, MASK), target, tau)
    # f = max over views: q0 -> [1, 1, 0.2], q1 -> [0.5, 2, 0.1]
    l0 = lse(1 / tau, 1 / tau, 0.2 / tau) - 1 / tau
    l1 = lse(0.5 / tau, 2 / tau, 0.1 / tau) - 2 / tau
    assert out.loss.item() == pytest.approx((l0 + l1) / 2, abs=1e-6)


def test_loss_registry():
    assert get_loss_class("contrastive") is ContrastiveLoss
    assert get_loss_class("mvr_global_local") is GlobalLocalLoss
    assert GlobalLocalLoss.from_options({"mvr_lambda": 0.5}).lam == 0.5


def test_annealed_temperature_paper_values():
    assert temperature_at(0, "annealed") == pytest.approx(1.0)
    assert temperature_at(5, "annealed") == pytest.approx(0.607, abs=5e-4)
    assert temperature_at(20, "annealed") == pytest.approx(0.3)
    assert temperature_at(7, "fixed", initial=0.05) == 0.05
    # generalised start and floor (the cosine-similarity runs of docs/results.md)
    assert temperature_at(3, "annealed", initial=0.1, minimum=0.03) == pytest.approx(0.1 * math.exp(-0.3))
    with pytest.raises(ValueError, match="unknown temperature schedule"):
        temperature_at(0, "cosine")


def test_local_variation_and_perplexity():
    scores = torch.tensor([[3.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
    # raw: LV = max - mean(others): (3 - 1.5) and (3 - 0)
    assert local_variation(scores, normalize=False).item() == pytest.approx((1.5 + 3.0) / 2)
    # the paper's: on the scores softmax-normalised over each pair's views (at a temperature)
    for tau in (1.0, 0.5):
        p = torch.softmax(scores / tau, dim=-1)
        want = [(row.max() - (row.sum() - row.max()) / 2).item() for row in p]
        assert local_variation(scores, temperature=tau).item() == pytest.approx(sum(want) / 2)
    # identical views: 0 either way; shifting every view's score changes nothing after normalising
    assert local_variation(torch.ones(3, 4)).item() == pytest.approx(0.0)
    assert local_variation(scores + 7.0).item() == pytest.approx(local_variation(scores).item())
    # padded views (-inf) are not views: a pair's k is its own, and one-view pairs are skipped
    padded = torch.tensor([[3.0, 1.0, float("-inf")], [2.0, float("-inf"), float("-inf")]])
    p = torch.softmax(torch.tensor([3.0, 1.0]), dim=-1)
    assert local_variation(padded).item() == pytest.approx((p[0] - p[1]).item())
    # doc 0: winners view 0 and view 2 -> p = [.5, 0, .5] -> PPL 2; doc 1: single winner -> PPL 1
    pair_scores = torch.tensor([[3.0, 0, 0], [0, 0, 3.0], [0, 5.0, 0]])
    docs = torch.tensor([0, 0, 1])
    assert view_perplexity(pair_scores, docs).item() == pytest.approx((2.0 + 1.0) / 2)
