"""Per-view scores, max-sim, Local Variation and view perplexity (scoring.py) against hand-computed values."""


import pytest
import torch

from multiview_plugin.scoring import local_variation, max_sim, view_perplexity, view_scores
from tests.losses.test_contrastive import MASK, P, Q


def test_view_scores_and_mask():
    s = view_scores(Q, P, MASK)
    assert s.shape == (2, 3, 2)
    assert s[0, 0].tolist() == [1.0, 0.5]
    assert s[1, 1].tolist() == [2.0, 1.0]
    assert s[0, 2, 1] == float("-inf")  # padded view never wins
    assert torch.allclose(max_sim(Q, P, MASK), torch.tensor([[1.0, 1.0, 0.2], [0.5, 2.0, 0.1]]))


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
