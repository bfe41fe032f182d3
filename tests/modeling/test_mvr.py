"""MVR (Multi-View document Representations): viewer tokens and their positions, the views read at those
positions, viewer initialisation, and the global-local loss (against hand-computed values) in training."""

import pytest
import torch

from multiview_plugin.errors import ConfigError
from multiview_plugin.losses import GlobalLocalLoss
from multiview_plugin.modeling.mvr import QUERY_VIEWER, viewer_tokens
from multiview_plugin.scoring import view_scores
from tests.losses.test_losses import MASK, P, Q, lse
from tests.modeling.test_modeling import TEXTS, build


def test_mvr_viewer_tokens_added_once_each(tiny_bert):
    model = build("mvr", tiny_bert, mvr_num_views=4)
    tok = model.tokenizer
    tokens = [QUERY_VIEWER, *viewer_tokens(4)]
    ids = tok.convert_tokens_to_ids(tokens)
    assert len(set(ids)) == 5 and tok.unk_token_id not in ids
    # each viewer is one unsplittable token, present exactly once in the vocabulary
    vocab = tok.get_vocab()
    assert all(sum(1 for t in vocab if t == name) == 1 for name in tokens)
    assert model.query_encoder.get_input_embeddings().weight.shape[0] == len(tok)

    batch = model.formatter.passages(TEXTS)
    for row in batch["input_ids"]:
        assert row[:4].tolist() == ids[1:]  # [VIE1]..[VIE4] replace [CLS]
        assert (row == tok.cls_token_id).sum() == 0
        for vid in ids:
            assert (row == vid).sum() == (0 if vid == ids[0] else 1)


def test_mvr_position_ids(tiny_bert):
    k = 3
    model = build("mvr", tiny_bert, mvr_num_views=k)
    batch = model.formatter.passages(TEXTS)
    lengths = batch["attention_mask"].sum(1)
    for row, n in zip(batch["position_ids"], lengths.tolist()):
        text_and_sep = n - k
        assert row[:n].tolist() == [0] * k + list(range(1, text_and_sep + 1))
    q = model.formatter.queries(["who wrote the book"])
    assert q["input_ids"][0, 0] == model.tokenizer.convert_tokens_to_ids(QUERY_VIEWER)
    assert q["position_ids"][0].tolist() == list(range(q["input_ids"].shape[1]))
    assert q["input_ids"][0, -1] == model.tokenizer.sep_token_id


def test_mvr_distinct_viewer_positions(tiny_bert):
    model = build("mvr", tiny_bert, {"passage_max_len": 32}, mvr_num_views=3, mvr_viewer_positions="distinct")
    batch = model.formatter.passages(TEXTS)
    for row, n in zip(batch["position_ids"], batch["attention_mask"].sum(1).tolist()):
        assert row[:n].tolist() == list(range(n))  # viewers 0..2, text from 3
    with pytest.raises(ConfigError, match="--mvr_viewer_positions must be 'shared' or 'distinct'"):
        build("mvr", tiny_bert, mvr_viewer_positions="random")
    with pytest.raises(ConfigError, match="needs 130 positions"):  # tiny BERT has 128
        build("mvr", tiny_bert, {"passage_max_len": 128}, mvr_num_views=3, mvr_viewer_positions="distinct")


def test_mvr_keeps_the_same_text_as_dpr(tiny_bert):
    long_text = " ".join(["paris is the capital of france"] * 30)
    mvr = build("mvr", tiny_bert, {"passage_max_len": 20}, mvr_num_views=8)
    dpr = build("dpr", tiny_bert, {"passage_max_len": 20})
    m = mvr.formatter.passages([long_text])
    d = dpr.formatter.passages([long_text])
    assert d["input_ids"].shape[1] == 20
    assert m["input_ids"].shape[1] == 20 - 1 + 8  # k viewers take position 0 instead of [CLS]
    assert m["input_ids"][0, 8:].tolist() == d["input_ids"][0, 1:].tolist()
    assert int(m["position_ids"].max()) == 19


def test_mvr_viewer_states_use_position_zero(tiny_bert):
    """The doc views are exactly the backbone's last-layer states at the viewer positions."""
    model = build("mvr", tiny_bert, mvr_num_views=3).eval()
    batch = model.formatter.passages(TEXTS)
    reps, mask = model.encode_passage(batch)
    assert reps.shape == (3, 3, 32) and mask.all()
    hidden = model.query_encoder(**batch).last_hidden_state
    assert torch.allclose(reps, hidden[:, :3])
    # without the explicit position ids the viewers would sit at positions 0,1,2 and differ
    wrong = model.query_encoder(**{k: v for k, v in batch.items() if k != "position_ids"}).last_hidden_state
    assert not torch.allclose(reps, wrong[:, :3])
    q = model.encode_query(model.formatter.queries(["what is paris"]))
    assert q.shape == (1, 32)
    assert model.compute_similarity(q, reps, mask).shape == (1, 3)


def test_mvr_viewer_init(tiny_bert):
    rnd = build("mvr", tiny_bert, mvr_num_views=2)
    cls_init = build("mvr", tiny_bert, mvr_num_views=2, mvr_viewer_init="cls")
    tok = rnd.tokenizer
    ids = tok.convert_tokens_to_ids(viewer_tokens(2))
    w_cls = cls_init.query_encoder.get_input_embeddings().weight
    w_rnd = rnd.query_encoder.get_input_embeddings().weight
    cls_vec = w_cls[tok.cls_token_id]
    # 'cls': near the [CLS] embedding but not identical to each other (symmetry broken)
    assert (w_cls[ids] - cls_vec).norm(dim=-1).max() < 0.5 * cls_vec.norm()
    assert not torch.allclose(w_cls[ids[0]], w_cls[ids[1]])
    # 'random': Gaussian at the scale of the backbone's existing word embeddings
    old = w_rnd[: tok.convert_tokens_to_ids("[VIE]")]
    assert w_rnd[ids].std().item() == pytest.approx(old.std().item(), rel=0.5)


def test_forward_training_loss_and_targets(tiny_bert):
    model = build("mvr", tiny_bert, mvr_num_views=2).train()
    f = model.formatter
    out = model(query=f.queries(["what is paris", "what is the moon"]),
                passage=f.passages([TEXTS[0], TEXTS[2], TEXTS[1], TEXTS[2]]))
    assert out.p_reps.shape == (4, 2, 32)
    # recompute by hand: positives at 0 and 2 (group size 2)
    scores = model.compute_view_scores(out.q_reps, out.p_reps, out.p_mask)
    expected = model.loss_fn(scores, torch.tensor([0, 2]), model.temperature).loss
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert set(out.parts) == {"loss_global", "loss_local"}
    model.set_epoch(5)
    assert model.temperature == pytest.approx(0.6065, abs=1e-4)


def test_global_local_loss_hand_computed():
    tau, lam = 0.5, 0.01
    target = torch.tensor([0, 1])
    out = GlobalLocalLoss(lam=lam)(view_scores(Q, P, MASK), target, tau)
    g0 = lse(1 / tau, 1 / tau, 0.2 / tau) - 1 / tau
    g1 = lse(0.5 / tau, 2 / tau, 0.1 / tau) - 2 / tau
    # local: softmax over the positive's own views, target = its max view
    l0 = lse(1.0 / tau, 0.5 / tau) - 1.0 / tau  # q0 vs passage 0 views [1, 0.5]
    l1 = lse(2.0 / tau, 1.0 / tau) - 2.0 / tau  # q1 vs passage 1 views [2, 1]
    assert out.parts["loss_global"].item() == pytest.approx((g0 + g1) / 2, abs=1e-6)
    assert out.parts["loss_local"].item() == pytest.approx((l0 + l1) / 2, abs=1e-6)
    assert out.loss.item() == pytest.approx((g0 + g1) / 2 + lam * (l0 + l1) / 2, abs=1e-6)


def test_local_loss_ignores_padded_views():
    # A positive with a single real view: its local loss is exactly 0 (softmax over one view).
    s = view_scores(Q[:1], P[2:], MASK[2:])
    out = GlobalLocalLoss(lam=1.0)(s, torch.tensor([0]), 1.0)
    assert out.parts["loss_local"].item() == pytest.approx(0.0, abs=1e-7)


def test_global_local_gradient_flows_to_all_views_through_local_term():
    p = P.clone().requires_grad_(True)
    out = GlobalLocalLoss(lam=1.0)(view_scores(Q, p, MASK), torch.tensor([0, 1]), 1.0)
    out.loss.backward()
    # the non-max view of passage 0 only gets gradient via L_local
    assert p.grad[0, 1].abs().sum() > 0
