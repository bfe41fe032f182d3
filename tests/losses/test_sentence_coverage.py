"""The sentence-coverage term (MVR --mvr_sentence_distill_weight) against hand-made vectors."""

import math

import pytest
import torch

from multiview_plugin.losses.sentence_coverage import sentence_coverage_loss


def test_sentence_coverage_is_zero_when_every_sentence_is_some_view():
    views = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                          [[1.0, 1.0, 0.0], [0.0, 0.0, 2.0], [5.0, 0.0, 0.0]]])
    # each sentence points along one of its passage's views (any length); padded sentences hold anything
    sentences = torch.tensor([[[0.0, 3.0, 0.0], [2.0, 0.0, 0.0], [9.0, 9.0, 9.0]],
                              [[0.0, 0.0, 0.5], [4.0, 4.0, 0.0], [0.0, 0.0, 7.0]]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert sentence_coverage_loss(views, sentences, sentence_mask=mask).item() == pytest.approx(0.0, abs=1e-6)
    # more sentences than views, two sentences covered by the same view: still 0
    assert sentence_coverage_loss(views[:1, :1], torch.tensor([[[1.0, 0.0, 0.0], [4.0, 0.0, 0.0]]])).item() == 0.0


def test_sentence_coverage_known_value_per_passage_mean_then_batch_mean():
    views = torch.tensor([[[1.0, 0.0], [0.0, 1.0]],
                          [[1.0, 0.0], [-1.0, 0.0]]])
    sentences = torch.tensor([[[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]],  # 45° from both views; a padded row; view 1
                              [[0.0, 1.0], [0.0, -1.0], [-1.0, 0.0]]])  # 90°, 90°, view 2
    mask = torch.tensor([[True, False, True], [True, True, True]])
    first = ((1 - math.cos(math.pi / 4)) + 0.0) / 2  # its two real sentences
    second = (1.0 + 1.0 + 0.0) / 3
    expected = (first + second) / 2  # passages weigh the same, whatever their number of sentences
    assert sentence_coverage_loss(views, sentences, sentence_mask=mask).item() == pytest.approx(expected, abs=1e-6)
    # a padded view covers nothing: without view 2, the second passage's last sentence is 2 away (cosine -1)
    view_mask = torch.tensor([[True, True], [True, False]])
    padded = sentence_coverage_loss(views, sentences, view_mask, mask).item()
    assert padded == pytest.approx((first + (1.0 + 1.0 + 2.0) / 3) / 2, abs=1e-6)


def test_sentence_coverage_passage_without_sentences_is_left_out():
    views = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    sentences = torch.tensor([[[0.0, 1.0]], [[0.0, 1.0]]])
    only_first = torch.tensor([[True], [False]])
    assert sentence_coverage_loss(views, sentences, sentence_mask=only_first).item() == pytest.approx(1.0)
    none = sentence_coverage_loss(views.requires_grad_(), sentences, sentence_mask=torch.zeros(2, 1, dtype=torch.bool))
    assert none.item() == 0.0 and none.requires_grad  # adding it to a loss still works


def test_sentence_coverage_teachers_are_detached_and_views_move_toward_them():
    views = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], requires_grad=True)
    sentences = torch.tensor([[[1.0, 0.2], [-1.0, 1.0]]], requires_grad=True)
    sentence_coverage_loss(views, sentences).backward()
    assert sentences.grad is None  # the teacher gets no gradient
    step = views.detach() - 0.1 * views.grad  # a descent step lowers the loss
    assert sentence_coverage_loss(step, sentences).item() < sentence_coverage_loss(views, sentences).item()
    assert views.grad[0, 1, 0] > 0  # view 2, nearest to sentence 2, turns toward it (its x falls)
