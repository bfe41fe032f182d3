"""Similarity functions between single-vector queries and multi-vector documents.

Kept apart from the losses (as in PyLate) so that training, evaluation and diagnostics share one definition.
A document's views come as a dense ``(P, K, D)`` tensor plus a boolean ``(P, K)`` mask; padded views score
``-inf`` so that max and softmax ignore them.
"""

from __future__ import annotations

import torch

__all__ = ["view_scores", "max_sim", "local_variation", "view_perplexity"]


def view_scores(q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-view inner products ``f_i(q, d) = <q, d_i>``.

    Parameters
    ----------
    q_reps : (Q, D) query vectors.
    p_reps : (P, K, D) document view vectors.
    p_mask : (P, K) bool, True for real views; None when every view is real.

    Returns
    -------
    (Q, P, K) scores, ``-inf`` where the view is padding.

    Examples
    --------
    >>> q = torch.tensor([[1.0, 0.0]]); d = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    >>> view_scores(q, d).tolist()
    [[[1.0, 0.0]]]
    """
    scores = torch.einsum("qd,pkd->qpk", q_reps, p_reps)
    if p_mask is not None:
        scores = scores.masked_fill(~p_mask.bool().unsqueeze(0), float("-inf"))
    return scores


def max_sim(q_reps: torch.Tensor, p_reps: torch.Tensor, p_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Document score ``f(q, d) = max_i <q, d_i>`` (MVR eq. 4); (Q, P)."""
    return view_scores(q_reps, p_reps, p_mask).max(dim=-1).values


def local_variation(pair_view_scores: torch.Tensor, temperature: float = 1.0, normalize: bool = True) -> torch.Tensor:
    """MVR's Local Variation (paper eq. 9, §5.2) averaged over query–document pairs.

    ``LV = max_i s_i - (sum_i s_i - max_i s_i) / (k - 1)`` for each row of ``(N, k)`` view scores. As in the
    paper, the scores are first normalised over the pair's views, ``s = softmax(f / temperature)`` (so LV lies in
    [0, 1]: 0 when the views score alike, 1 when one view takes all); ``normalize=False`` uses the raw scores.
    Padded views (``-inf``) are left out, k is each pair's own number of views, and pairs with fewer than two
    views are skipped.

    >>> round(local_variation(torch.tensor([[0.0, 0.0]])).item(), 6)       # identical views
    0.0
    >>> round(local_variation(torch.tensor([[1.0, 0.0, 0.0]]), normalize=False).item(), 6)
    1.0
    """
    scores = pair_view_scores.double()
    valid = torch.isfinite(scores)
    k = valid.sum(dim=-1)
    keep = k >= 2
    if not bool(keep.any()):
        raise ValueError("local variation needs pairs with at least two views")
    scores, valid, k = scores[keep], valid[keep], k[keep]
    if normalize:
        scores = torch.softmax(scores / temperature, dim=-1)  # -inf padding → probability 0
    scores = torch.where(valid, scores, torch.zeros_like(scores))
    top = scores.masked_fill(~valid, float("-inf")).max(dim=-1).values
    rest = (scores.sum(dim=-1) - top) / (k - 1)
    return (top - rest).mean()


def view_perplexity(pair_view_scores: torch.Tensor, doc_index: torch.Tensor) -> torch.Tensor:
    """MVR's view perplexity (paper eq. 10), averaged over documents.

    For each document, take the distribution ``p`` of the arg-max view over the queries that match it and
    return the mean of ``exp(-sum p log p)``. ``pair_view_scores`` is (N, k), ``doc_index`` (N,) gives the
    document of each query–document pair.
    """
    k = pair_view_scores.shape[-1]
    winners = pair_view_scores.argmax(dim=-1)
    docs, doc_pos = torch.unique(doc_index, return_inverse=True)
    counts = torch.zeros(len(docs), k, dtype=torch.float64)
    counts.index_put_((doc_pos, winners), torch.ones_like(winners, dtype=torch.float64), accumulate=True)
    p = counts / counts.sum(dim=-1, keepdim=True)
    entropy = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(dim=-1)
    return entropy.exp().mean()
