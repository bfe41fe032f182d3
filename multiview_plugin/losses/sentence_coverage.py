"""Sentence coverage: a passage's views distilled toward its sentence vectors (MVR ``--mvr_sentence_distill_weight``).

Not a retrieval loss of its own (so not registered for ``--loss_name``) but a term the residual MVR form adds to
its loss. It is the one-sided Chamfer distance between two point sets (Fan, Su & Guibas, 2017, "A Point Set
Generation Network for 3D Object Reconstruction from a Single Image", eq. 1), measured in cosine distance, from the
passage's sentence vectors to its views: every sentence should lie near some view. The sentence vectors are
detached teachers, as in knowledge distillation (Hinton, Vinyals & Dean, 2015, "Distilling the Knowledge in a
Neural Network"); they are DCSR's ``--dcsr_sentence_pooling mean`` sentence views (Wu et al., 2022), so the
distilled views drift toward the distinct sentences that issue 24 ("views initialised from or distilled toward
sentence views") asks them to specialise on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sentence_coverage_loss(views: torch.Tensor, sentences: torch.Tensor, view_mask: torch.Tensor | None = None,
                           sentence_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``mean_p mean_j (1 - max_i cos(v_i, s_j))`` over passages p and their real sentences j.

    ``views`` (B, K, D) and ``view_mask`` (B, K) are each passage's views; ``sentences`` (B, S, D) and
    ``sentence_mask`` (B, S) its sentence vectors, which are detached here (teachers: only the views move). A
    sentence's term is 0 when some view points exactly its way and grows to 2 when every view points away; a
    passage's is the mean over its sentences, and the loss the mean over the passages with at least one sentence
    (0 when none has). Padded views never cover a sentence.

    Examples
    --------
    >>> views = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # one passage, two views
    >>> sentence_coverage_loss(views, torch.tensor([[[2.0, 0.0], [0.0, 3.0]]])).item()  # each sentence is a view
    0.0
    >>> sentences = torch.tensor([[[1.0, 0.0], [-1.0, 1.0]]])  # the second is 45 degrees from view 2
    >>> round(sentence_coverage_loss(views, sentences).item(), 4)  # (0 + 1 - cos 45°) / 2
    0.1464
    """
    unit_views = F.normalize(views.float(), dim=-1)
    unit_sentences = F.normalize(sentences.detach().float(), dim=-1)
    cosine = unit_sentences @ unit_views.transpose(1, 2)  # (B, S, K)
    if view_mask is not None:
        cosine = cosine.masked_fill(~view_mask.bool()[:, None, :], float("-inf"))
    gap = 1.0 - cosine.max(dim=-1).values  # (B, S)
    if sentence_mask is None:
        sentence_mask = torch.ones(gap.shape, dtype=torch.bool, device=gap.device)
    counts = sentence_mask.sum(dim=1).to(gap.dtype)
    per_passage = gap.masked_fill(~sentence_mask.bool(), 0.0).sum(dim=1) / counts.clamp(min=1.0)
    has = counts > 0
    if not bool(has.any()):
        return (views.float() * 0.0).sum()
    return per_passage[has].mean()
