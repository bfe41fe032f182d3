"""MVR (Multi-View document Representations): viewer tokens and their positions, the views read at those
positions, viewer initialisation, and the global-local loss (against hand-computed values) in training."""

import json

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.errors import ConfigError
from multiview_plugin.losses import GlobalLocalLoss
from multiview_plugin.losses.sentence_coverage import sentence_coverage_loss
from multiview_plugin.modeling import load_encoder
from multiview_plugin.modeling.dcsr import span_means
from multiview_plugin.modeling.mvr import QUERY_VIEWER, MvrOptions, read_only_viewer_mask, viewer_tokens
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.scoring import view_scores
from tests.losses.test_contrastive import MASK, P, Q, lse
from tests.modeling.test_base import TEXTS, build


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


# --------------------------------------------------------------- load balancing (--mvr_balance_weight)
def paper_global_local(scores, target, tau, lam):
    """The paper's L_global + lam * L_local (eqs. 5-7), written out independently of the loss class."""
    scaled = scores / tau
    loss_global = torch.nn.functional.cross_entropy(scaled.max(dim=-1).values, target)
    pos = scaled[torch.arange(len(target)), target]
    return loss_global + lam * (torch.logsumexp(pos, dim=-1) - pos.max(dim=-1).values).mean()


def test_balance_weight_zero_is_exactly_the_paper_loss():
    torch.manual_seed(0)
    logits = torch.randn(4, 8, 3, requires_grad=True)
    target = torch.tensor([0, 2, 4, 6])
    assert GlobalLocalLoss.from_options(MvrOptions()).balance_weight == 0.0  # the default is the paper's form
    out = GlobalLocalLoss.from_options(MvrOptions(lam=0.3))(logits, target, 0.5)
    (grad,) = torch.autograd.grad(out.loss, logits)
    expected = paper_global_local(logits, target, 0.5, 0.3)
    (expected_grad,) = torch.autograd.grad(expected, logits)
    assert torch.equal(out.loss, expected) and torch.equal(grad, expected_grad)
    assert set(out.parts) == {"loss_global", "loss_local"}  # no new logged part either


def test_balance_weight_changes_the_loss_and_the_gradient_of_gates_and_viewers(tiny_bert):
    model = build("mvr", tiny_bert, mvr_num_views=3, mvr_views="residual", pooling="mean",
                  mvr_balance_weight=0.5).train()
    assert model.loss_fn.balance_weight == 0.5  # the option reaches the loss
    with torch.no_grad():
        model.view_gates.fill_(0.5)  # at 0 the viewer embeddings get no gradient at all
    f = model.formatter
    queries, passages = f.queries(["what is paris", "what is the moon"]), f.passages(TEXTS[:2] * 2)
    q_reps, (p_reps, p_mask) = model.encode_query(queries), model.encode_passage(passages)
    target = torch.tensor([0, 1])
    embeddings = model.query_encoder.get_input_embeddings().weight
    viewer_rows = model.tokenizer.convert_tokens_to_ids(viewer_tokens(3))
    balanced = model.compute_loss(q_reps, p_reps, p_mask, target)
    grads = torch.autograd.grad(balanced.loss, [model.view_gates, embeddings], retain_graph=True)
    model.loss_fn.balance_weight = 0.0
    paper = model.compute_loss(q_reps, p_reps, p_mask, target)
    paper_grads = torch.autograd.grad(paper.loss, [model.view_gates, embeddings])
    assert "loss_balance" in balanced.parts and "loss_balance" not in paper.parts
    assert balanced.loss.item() == pytest.approx(paper.loss.item() + 0.5 * balanced.parts["loss_balance"].item(),
                                                 abs=1e-6)
    assert balanced.parts["loss_balance"].item() >= 1.0 - 1e-6  # all views near dpr's vector: one wins every query
    assert not torch.allclose(grads[0], paper_grads[0])  # the gates
    assert not torch.allclose(grads[1][viewer_rows], paper_grads[1][viewer_rows])  # the viewer embeddings
    # and the trained model logs it
    model.loss_fn.balance_weight = 0.5
    assert "loss_balance" in model(query=queries, passage=passages).parts


def test_balance_weight_round_trips_and_is_validated(tiny_bert, tmp_path):
    model = build("mvr", tiny_bert, mvr_num_views=2, mvr_balance_weight=0.05)
    model.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"]
    assert saved["mvr_balance_weight"] == 0.05
    loaded = load_encoder(tmp_path / "m")
    assert loaded.config.options.balance_weight == 0.05 and loaded.loss_fn.balance_weight == 0.05
    with pytest.raises(ConfigError, match="--mvr_balance_weight must be >= 0"):
        build("mvr", tiny_bert, mvr_balance_weight=-0.1)
    with pytest.raises(ConfigError, match="is a term of the mvr_global_local loss"):
        build("mvr", tiny_bert, mvr_balance_weight=0.1, loss_name="contrastive")
    assert build("mvr", tiny_bert, loss_name="contrastive").config.options.balance_weight == 0.0


# ------------------------------------------------------- viewers that specialise (--mvr_viewer_scope, issue 24)
SCOPE_TEXTS = ["a cat is a small animal and a dog is a large one", "the moon", "paris is the capital of france"]


def residual(backbone, **kwargs):
    return build("mvr", backbone, mvr_views="residual", pooling="mean", **kwargs).eval()


def viewer_states(model, batch):
    """The last-layer states of the k viewers, (B, k, H), as ``encode_passage`` computes them (a hook on the
    passage encoder), and the passage vectors."""
    seen = []
    hook = model.p_encoder.register_forward_hook(lambda _m, _i, out: seen.append(out.last_hidden_state))
    try:
        with torch.no_grad():
            reps, _ = model.encode_passage(batch)
    finally:
        hook.remove()
    return seen[0][:, int(batch["num_text_tokens"]):], reps


def expected_segments(n, k):
    """Segment i of n real tokens: ranks floor(i*n/k) .. floor((i+1)*n/k) - 1, written out by hand; an empty one
    is the whole text."""
    out = []
    for i in range(k):
        ranks = set(range(i * n // k, (i + 1) * n // k))
        out.append(ranks or set(range(n)))
    return out


def allowed_columns(mask, row):
    return {c for c in range(mask.shape[-1]) if mask[0, row, c] == 0}


@pytest.mark.parametrize("k", [3, 8])
def test_segment_mask_gives_each_viewer_its_own_segment_and_itself(tiny_bert, k):
    model = residual(tiny_bert, mvr_num_views=k, mvr_viewer_scope="segments")
    batch = model.formatter.passages(SCOPE_TEXTS)
    num_text = int(batch["num_text_tokens"])
    segments = read_only_viewer_mask(batch["attention_mask"], num_text, torch.float32, "segments")
    full = read_only_viewer_mask(batch["attention_mask"], num_text, torch.float32)
    assert torch.equal(full, read_only_viewer_mask(batch["attention_mask"], num_text, torch.float32, "full"))
    for b, n in enumerate(batch["attention_mask"][:, :num_text].sum(1).tolist()):
        assert batch["attention_mask"][b, :n].all()  # right-padded: the real tokens are positions 0..n-1
        for i, expected in enumerate(expected_segments(n, k)):
            viewer = num_text + i
            assert allowed_columns(segments[b], viewer) == expected | {viewer}
            assert allowed_columns(full[b], viewer) == set(range(n)) | {viewer}  # 'full': the whole text
        for row in range(num_text):  # the text rows are the same in both scopes: the real text, no viewer
            assert allowed_columns(segments[b], row) == allowed_columns(full[b], row) == set(range(n))
    covered = [set().union(*expected_segments(n, k)) for n in (14, 2)]
    assert covered == [set(range(14)), {0, 1}]  # the segments of a passage cover all of its text


def test_viewer_scope_full_is_the_default_and_unchanged(tiny_bert):
    model = residual(tiny_bert, mvr_num_views=3)
    assert model.options.viewer_scope == "full" and MvrOptions().viewer_scope == "full"
    with torch.no_grad():
        model.view_gates.copy_(torch.tensor([0.5, -0.5, 1.0]))
    batch = model.formatter.passages(SCOPE_TEXTS)
    states, default = viewer_states(model, batch)
    # the same weights read by hand with the mask every viewer reads the whole text in
    plain = dict(batch)
    num_text = int(plain.pop("num_text_tokens"))
    plain["attention_mask"] = read_only_viewer_mask(plain["attention_mask"], num_text, torch.float32)
    with torch.no_grad():
        hidden = model.p_encoder(**plain).last_hidden_state
    assert torch.equal(states, hidden[:, num_text:])
    model.options.viewer_scope = "segments"
    assert not torch.allclose(viewer_states(model, batch)[1], default, atol=1e-4)  # the option is read
    model.options.viewer_scope = "full"
    assert torch.equal(viewer_states(model, batch)[1], default)


def test_segment_viewer_reads_only_its_own_segment(tmp_path):
    """With one layer a viewer's state is a function of its segment alone: changing any token outside it leaves
    the state exactly as it was, changing one inside moves it. (Deeper encoders: the viewer still attends only to
    its segment's positions, but their states carry context from the whole passage, as in dpr.)"""
    from tools.testing import make_tiny_bert

    k = 3
    model = residual(make_tiny_bert(tmp_path / "one_layer", layers=1), mvr_num_views=k, mvr_viewer_scope="segments")
    with torch.no_grad():
        model.view_gates.fill_(0.5)  # trained-ish: the views read the viewers
    batch = model.formatter.passages(SCOPE_TEXTS[:1])
    n = int(batch["attention_mask"][0, :int(batch["num_text_tokens"])].sum())
    assert n >= 2 * k  # every segment holds at least two tokens
    states, reps = viewer_states(model, batch)
    other_word = model.tokenizer.convert_tokens_to_ids("paris")
    for i, segment in enumerate(expected_segments(n, k)):
        outside = dict(batch, input_ids=batch["input_ids"].clone())
        outside["input_ids"][0, [t for t in range(n) if t not in segment]] = other_word
        changed, _ = viewer_states(model, outside)
        torch.testing.assert_close(changed[:, i], states[:, i], atol=1e-6, rtol=0)
        others = [j for j in range(k) if j != i]
        assert (changed[:, others] - states[:, others]).abs().amax(-1).min() > 1e-3  # the others read it
        inside = dict(batch, input_ids=batch["input_ids"].clone())
        inside["input_ids"][0, max(segment)] = other_word
        assert (viewer_states(model, inside)[0][:, i] - states[:, i]).abs().max() > 1e-3


def test_segment_viewers_start_exactly_as_dpr(tiny_bert):
    dpr = build("dpr", tiny_bert, pooling="mean", normalize=True).eval()
    mvr = residual(tiny_bert, mvr_num_views=4, mvr_viewer_scope="segments", normalize=True)
    queries = ["what is the capital of france", "where is the moon"]

    def scores(model):
        with torch.no_grad():
            p, mask = model.encode_passage(model.formatter.passages(SCOPE_TEXTS))
            return model.compute_similarity(model.encode_query(model.formatter.queries(queries)), p, mask)

    torch.testing.assert_close(scores(mvr), scores(dpr), atol=1e-5, rtol=0)


def test_viewer_scope_round_trips(tiny_bert, tmp_path):
    model = residual(tiny_bert, mvr_num_views=3, mvr_viewer_scope="segments")
    with torch.no_grad():
        model.view_gates.copy_(torch.tensor([0.5, -0.5, 1.0]))
    batch = model.formatter.passages(SCOPE_TEXTS)
    _, reps = viewer_states(model, batch)
    model.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"]
    assert saved["mvr_viewer_scope"] == "segments"
    loaded = load_encoder(tmp_path / "m").eval()
    assert loaded.options.viewer_scope == "segments"
    torch.testing.assert_close(viewer_states(loaded, batch)[1], reps, atol=1e-6, rtol=0)
    loaded.options.viewer_scope = "full"  # the saved option, not a default, made those vectors
    assert not torch.allclose(viewer_states(loaded, batch)[1], reps, atol=1e-4)


def test_viewer_scope_is_validated_in_one_line(tiny_bert):
    from multiview_plugin.arguments import refuse_foreign_options

    with pytest.raises(ConfigError, match="--mvr_viewer_scope segments applies to --mvr_views residual or region "
                                          "only") as err:
        build("mvr", tiny_bert, mvr_viewer_scope="segments")  # the paper's views
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="--mvr_viewer_scope must be one of full, segments, got 'halves'"):
        residual(tiny_bert, mvr_viewer_scope="halves")
    assert build("mvr", tiny_bert, mvr_viewer_scope="full").options.viewer_scope == "full"  # the default: fine
    with pytest.raises(ConfigError, match="--mvr_viewer_scope belongs to mvr, not --model_name dpr"):
        refuse_foreign_options(["--model_name", "dpr", "--mvr_viewer_scope", "segments"], "dpr")


def test_segment_viewer_of_a_short_passage_reads_the_whole_text(tiny_bert):
    """Fewer real tokens than viewers: a viewer whose segment would be empty reads the whole text, exactly as
    with --mvr_viewer_scope full; the others read their one token."""
    k = 8
    model = residual(tiny_bert, mvr_num_views=k, mvr_viewer_scope="segments")
    batch = model.formatter.passages(["the moon"])
    n = int(batch["attention_mask"][0, :int(batch["num_text_tokens"])].sum())
    assert n == 4  # [CLS] the moon [SEP]
    empty = [i for i in range(k) if i * n // k == (i + 1) * n // k]
    assert empty == [0, 2, 4, 6]
    segments, _ = viewer_states(model, batch)
    model.options.viewer_scope = "full"
    full, _ = viewer_states(model, batch)
    torch.testing.assert_close(segments[:, empty], full[:, empty], atol=1e-6, rtol=0)
    one_token = [1, 3, 5, 7]
    assert (segments[:, one_token] - full[:, one_token]).abs().amax(-1).min() > 1e-3


# ------------------------------------- views distilled toward sentence views (--mvr_sentence_distill_weight, issue 24)
SENTENCE_TEXTS = ["paris is the capital of france. it was built on the river. the king wrote a book.",
                  "the moon is small.",
                  "a cat is a small animal. a dog is a large one."]
SPAN_KEYS = ("sentence_starts", "sentence_ends", "sentence_mask")


def distill_batch(model, texts=SENTENCE_TEXTS):
    """The training collator's batch: one query per pair of passages (group size 2)."""
    features = [{"query": q, "passages": texts[i:i + 2]} for i, q in zip((0, 1), ("what is paris", "the moon"))]
    return model.train_collator()(features)


def gradients(model, loss):
    embeddings = model.query_encoder.get_input_embeddings().weight
    viewer_rows = model.tokenizer.convert_tokens_to_ids(viewer_tokens(model.options.num_views))
    gates, emb = torch.autograd.grad(loss, [model.view_gates, embeddings], retain_graph=True)
    return gates, emb[viewer_rows]


@pytest.mark.parametrize("passage_max_len", [128, 14])
def test_sentence_teachers_are_dcsr_mean_sentence_views_of_the_same_text(tiny_bert, passage_max_len):
    """The teachers are exactly dcsr's --dcsr_sentence_pooling mean sentence views of the passage (same sentences,
    same token spans, same vectors), read from the residual model's own text states; a passage cut by
    --passage_max_len keeps the sentences it shows, the last one cut short, as dcsr's do."""
    data = {"passage_max_len": passage_max_len}
    mvr = build("mvr", tiny_bert, data, mvr_views="residual", pooling="mean", normalize=True, mvr_num_views=3,
                mvr_sentence_distill_weight=0.1).eval()
    dcsr = build("dcsr", tiny_bert, data, pooling="mean", normalize=True, dcsr_sentence_pooling="mean").eval()
    spans = mvr.train_collator().formatter.passages(SENTENCE_TEXTS)
    plain = mvr.formatter.passages(SENTENCE_TEXTS)
    assert set(spans) == set(plain) | set(SPAN_KEYS) and not set(SPAN_KEYS) & set(plain)  # encoding: no spans
    assert all(torch.equal(spans[key], plain[key]) for key in plain)  # the text the model reads is unchanged
    reference = dcsr.formatter.passages(SENTENCE_TEXTS)
    num_text = int(plain["num_text_tokens"])
    assert torch.equal(reference["input_ids"], plain["input_ids"][:, :num_text])
    for key in SPAN_KEYS:
        assert torch.equal(spans[key], reference[key]), key
    if passage_max_len == 14:
        assert spans["sentence_mask"].sum(1).tolist() == [2, 1, 2]  # sentences dropped by truncation
    with torch.no_grad():
        _, text_states = mvr._residual_views({k: v for k, v in spans.items() if k not in SPAN_KEYS})
        teachers = mvr._finish(span_means(text_states, spans["sentence_starts"], spans["sentence_ends"]))
        expected, mask = dcsr.encode_passage(reference)
    torch.testing.assert_close(teachers[mask], expected[mask], atol=1e-5, rtol=0)


def test_sentence_distill_weight_zero_leaves_the_batch_loss_and_gradients_unchanged(tiny_bert):
    assert MvrOptions().sentence_distill_weight == 0.0
    model = residual(tiny_bert, mvr_num_views=3).train()
    with torch.no_grad():
        model.view_gates.fill_(0.5)
    batch = distill_batch(model)
    plain = model.formatter.passages([p for i in (0, 1) for p in SENTENCE_TEXTS[i:i + 2]])
    assert set(batch["passage"]) == set(plain) and all(torch.equal(batch["passage"][k], plain[k]) for k in plain)
    torch.manual_seed(0)
    out = model(**batch)
    torch.manual_seed(0)  # the same dropout: the contrastive loss written out from the encoders, as before
    expected = model.loss_from_reps(model.encode_query(batch["query"]), *model.encode_passage(batch["passage"]))
    assert set(out.parts) == {"loss_global", "loss_local"}
    assert torch.equal(out.loss, expected.loss)
    for got, want in zip(gradients(model, out.loss), gradients(model, expected.loss)):
        assert torch.equal(got, want)


def test_sentence_distill_weight_adds_the_coverage_term_and_moves_gates_and_viewers(tiny_bert):
    model = residual(tiny_bert, mvr_num_views=3, normalize=True, mvr_sentence_distill_weight=0.5).train()
    batch = distill_batch(model)
    assert set(SPAN_KEYS) <= set(batch["passage"]) and not set(SPAN_KEYS) & set(batch["query"])
    without = {"query": batch["query"], "passage": {k: v for k, v in batch["passage"].items() if k not in SPAN_KEYS}}
    torch.manual_seed(0)
    out = model(**batch)
    torch.manual_seed(0)
    base = model(**without)
    distill = out.parts["loss_distill"]
    assert "loss_distill" not in base.parts and 0 < distill.item() < 2
    assert out.loss.item() == pytest.approx(base.loss.item() + 0.5 * distill.item(), abs=1e-6)
    # untrained (gates at 0) every view is the pooled text: the term reaches the gates already, through the view
    # that wins the max's tie (the first), so views leave the text one at a time
    gate_grad, _ = gradients(model, out.loss - base.loss)
    assert gate_grad[0].abs() > 1e-4
    with torch.no_grad():
        model.view_gates.fill_(0.5)  # at 0 the viewer embeddings get no gradient at all
    torch.manual_seed(0)
    out = model(**batch)
    torch.manual_seed(0)
    base = model(**without)
    with_term, without_term = gradients(model, out.loss), gradients(model, base.loss)
    assert not torch.allclose(with_term[0], without_term[0])  # the gates
    assert not torch.allclose(with_term[1], without_term[1])  # the viewer embeddings
    assert gradients(model, out.loss - base.loss)[1].abs().amax(-1).min() > 0  # every viewer moves
    # the term is the coverage loss of the batch's passages (all four, never the queries), written out
    torch.manual_seed(0)  # the forward's dropout: queries first, then passages
    with torch.no_grad():
        model.encode_query(batch["query"])
        views, text_states = model._residual_views(without["passage"])
    teachers = model._finish(span_means(text_states, batch["passage"]["sentence_starts"],
                                        batch["passage"]["sentence_ends"]))
    assert views.shape[0] == 4
    expected = sentence_coverage_loss(views, teachers, sentence_mask=batch["passage"]["sentence_mask"])
    assert out.parts["loss_distill"].item() == pytest.approx(expected.item(), abs=1e-6)


def test_sentence_distill_weight_round_trips_and_is_validated(tiny_bert, tmp_path):
    from multiview_plugin.arguments import refuse_foreign_options

    model = residual(tiny_bert, mvr_num_views=2, mvr_sentence_distill_weight=0.25)
    model.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"]
    assert saved["mvr_sentence_distill_weight"] == 0.25
    loaded = load_encoder(tmp_path / "m")
    assert loaded.options.sentence_distill_weight == 0.25
    assert set(SPAN_KEYS) <= set(distill_batch(loaded)["passage"])  # the reloaded model trains with it
    assert not set(SPAN_KEYS) & set(loaded.formatter.passages(SENTENCE_TEXTS))  # and encodes without it
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="--mvr_sentence_distill_weight must be a finite number >= 0") as err:
            residual(tiny_bert, mvr_sentence_distill_weight=bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="--mvr_sentence_distill_weight 0.1 applies to --mvr_views residual or "
                       "region only"
                       ) as err:
        build("mvr", tiny_bert, mvr_sentence_distill_weight=0.1)  # the paper's views
    assert "\n" not in str(err.value)
    assert build("mvr", tiny_bert, mvr_sentence_distill_weight=0.0).options.sentence_distill_weight == 0.0
    with pytest.raises(ConfigError, match="--mvr_sentence_distill_weight belongs to mvr, not --model_name dpr"):
        refuse_foreign_options(["--model_name", "dpr", "--mvr_sentence_distill_weight", "0.1"], "dpr")
    # --grad_cache encodes passages without their queries: refused in one line, not silently dropped
    model.train()
    with pytest.raises(ConfigError, match="not with --grad_cache"):
        model(passage=distill_batch(model)["passage"])


def test_quickstart_train_flag_sentence_distill_reaches_the_saved_config(tiny_bert, tmp_path, monkeypatch):
    """`--systems mvr-residual "--train_flags=--mvr_sentence_distill_weight 0.1"`: the quickstart's train command,
    parsed by the train driver's own parser and built as the train driver builds it (no training run)."""
    from multiview_plugin.arguments import DataArguments, DevArguments, ModelArguments, MultiViewTrainingArguments
    from multiview_plugin.cli import parse_dataclasses
    from multiview_plugin.driver import train
    from multiview_plugin.quickstart import __main__ as quickstart

    seen = {}

    def fake_train(argv):
        model_args, data_args, _, training_args = parse_dataclasses(
            (ModelArguments, DataArguments, DevArguments, MultiViewTrainingArguments), argv, driver="train")
        model = train.build_model(model_args, data_args)
        seen["batch"] = distill_batch(model)
        model.save(training_args.output_dir)
        return 0

    monkeypatch.setattr(quickstart, "train_main", fake_train)
    args = quickstart.build_parser().parse_args(["--backbone", str(tiny_bert), "--systems", "mvr-residual",
                                                 "--train_flags=--mvr_sentence_distill_weight 0.1",
                                                 "--tag=-distill0.1"])
    model_dir, _, _ = quickstart.train_system("mvr-residual", args, {"train": tmp_path / "train.jsonl"}, tmp_path)
    config = json.loads((model_dir / "multiview_config.json").read_text())
    assert model_dir.name == "mvr-residual-distill0.1"
    assert config["options"]["mvr_sentence_distill_weight"] == 0.1 and config["options"]["mvr_views"] == "residual"
    assert set(SPAN_KEYS) <= set(seen["batch"]["passage"])


# ---------------------------------------------- views that differ from step 0 (issue 32): --mvr_view_init
def views_at_start(model, texts=SENTENCE_TEXTS):
    """The passage views of the untrained model (gates at 0), (B, k, D), and the text token states."""
    assert not model.view_gates.any()
    with torch.no_grad():
        batch = model.formatter.passages(texts)
        views, _ = model.encode_passage(batch)
        _, text_states = model._residual_views(batch)
    return views, text_states, batch


def pairwise_cosine(views):
    unit = torch.nn.functional.normalize(views, dim=-1)
    return unit @ unit.transpose(1, 2)


def test_view_init_none_is_the_default_and_every_view_starts_as_the_pooled_text(tiny_bert):
    assert MvrOptions().view_init == "none"
    model = residual(tiny_bert, mvr_num_views=3, normalize=True)
    views, _, batch = views_at_start(model)
    assert not set(SPAN_KEYS) & set(batch)  # encoding asks for no sentence spans
    assert torch.allclose(pairwise_cosine(views), torch.ones(3, 3, 3), atol=1e-5)  # the symmetric start


def test_view_init_sentences_starts_each_view_at_its_sentence_view(tiny_bert):
    """At step 0 view i is dcsr-mean's sentence view i (same spans, same vectors): passage 0 has 3 sentences for
    2 views (the last view takes sentences 2..3 together), passage 1 one (its spare view is dpr's vector)."""
    mvr = residual(tiny_bert, mvr_num_views=2, normalize=True, mvr_view_init="sentences")
    dcsr = build("dcsr", tiny_bert, pooling="mean", normalize=True, dcsr_sentence_pooling="mean").eval()
    dpr = build("dpr", tiny_bert, pooling="mean", normalize=True).eval()
    views, text_states, batch = views_at_start(mvr)
    assert set(SPAN_KEYS) <= set(batch)  # the model's own formatter finds the sentences, for encoding too
    with torch.no_grad():
        sentences, mask = dcsr.encode_passage(dcsr.formatter.passages(SENTENCE_TEXTS))
        passage = dpr.encode_passage(dpr.formatter.passages(SENTENCE_TEXTS))[0][:, 0]
    assert mask.sum(1).tolist() == [3, 1, 2]
    torch.testing.assert_close(views[0, 0], sentences[0, 0], atol=1e-5, rtol=0)
    start, end = int(batch["sentence_starts"][0, 1]), int(batch["sentence_ends"][0, 2])
    merged = mvr._finish(text_states[0, start:end].mean(0))
    torch.testing.assert_close(views[0, 1], merged, atol=1e-5, rtol=0)
    assert not torch.allclose(views[0, 1], sentences[0, 1], atol=1e-3)
    torch.testing.assert_close(views[1, 0], sentences[1, 0], atol=1e-5, rtol=0)
    torch.testing.assert_close(views[1, 1], passage[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(views[2], sentences[2, :2], atol=1e-5, rtol=0)
    cosine = pairwise_cosine(views)
    assert cosine[0, 0, 1] < 0.999 and cosine[2, 0, 1] < 0.999  # the views differ per view at step 0


@pytest.mark.parametrize("how", ["segments", "kmeans"])
def test_view_init_regions_start_each_view_at_its_region_mean(tiny_bert, how):
    """'segments': view i = the mean of segment i's token states (the --mvr_viewer_scope segments' segments);
    'kmeans': of cluster i of a k-means of the token states (the clusters partition the real tokens). Each view
    starts elsewhere, unlike 'none'."""
    from multiview_plugin.modeling.mvr import kmeans_members, segment_mask

    k = 3
    model = residual(tiny_bert, mvr_num_views=k, normalize=True, mvr_view_init=how)
    views, text_states, batch = views_at_start(model)
    assert not set(SPAN_KEYS) & set(batch)
    text_mask = batch["attention_mask"][:, :int(batch["num_text_tokens"])].bool()
    if how == "segments":
        members = segment_mask(text_mask, k)
    else:
        members = kmeans_members(text_states, text_mask, k)
        assert torch.equal(members.sum(1), text_mask.long())  # every real token in exactly one cluster
        assert torch.equal(members, kmeans_members(text_states, text_mask, k))  # deterministic
        assert not torch.equal(members, segment_mask(text_mask, k))  # the Lloyd steps moved the segments
    for b in range(len(SENTENCE_TEXTS)):
        for i in range(k):
            if members[b, i].any():
                expected = model._finish(text_states[b, members[b, i]].mean(0))
            else:  # an empty cluster: the pooled text
                expected = model._finish(text_states[b, text_mask[b]].mean(0))
            torch.testing.assert_close(views[b, i], expected, atol=1e-5, rtol=0)
    off_diagonal = ~torch.eye(k, dtype=torch.bool)
    assert pairwise_cosine(views)[0][off_diagonal].max() < 0.999  # a 3-sentence passage: 3 different views
    assert model.viewer_similarity() < residual(tiny_bert, mvr_num_views=k, normalize=True).viewer_similarity()


def test_kmeans_members_clusters_separable_states():
    """Two well-separated groups of token states, interleaved: the k-means keeps them apart (a cluster holds one
    group only), whatever the contiguous segments it starts from."""
    from multiview_plugin.modeling.mvr import kmeans_members

    a, b = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0])
    hidden = torch.stack([a, b, a, b, a, b, torch.zeros(3)])[None] + 0.01 * torch.randn(1, 7, 3)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    members = kmeans_members(hidden, mask, 2)[0]
    assert not members[:, 6].any()  # padding in no cluster
    groups = {tuple(m.nonzero().flatten().tolist()) for m in members}
    assert groups == {(0, 2, 4), (1, 3, 5)}


def test_view_init_gates_then_move_the_views_off_their_bases(tiny_bert):
    model = residual(tiny_bert, mvr_num_views=2, normalize=True, mvr_view_init="segments")
    start, _, batch = views_at_start(model)
    with torch.no_grad():
        model.view_gates.fill_(0.5)
        moved, _ = model.encode_passage(batch)
    assert (moved - start).abs().amax(-1).min() > 1e-3


def test_view_init_round_trips_and_is_validated(tiny_bert, tmp_path):
    from multiview_plugin.arguments import refuse_foreign_options

    model = residual(tiny_bert, mvr_num_views=2, normalize=True, mvr_view_init="sentences")
    views, _, batch = views_at_start(model)
    model.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"]["mvr_view_init"] == \
        "sentences"
    loaded = load_encoder(tmp_path / "m").eval()
    assert loaded.options.view_init == "sentences"
    torch.testing.assert_close(views_at_start(loaded)[0], views, atol=1e-6, rtol=0)
    assert set(SPAN_KEYS) <= set(distill_batch(loaded)["passage"])  # trains with the spans too
    loaded.options.view_init = "none"  # the saved option, not a default, made those vectors
    with torch.no_grad():
        assert not torch.allclose(loaded.encode_passage(batch)[0], views, atol=1e-4)
    with pytest.raises(ConfigError, match="--mvr_view_init must be one of none, sentences, segments, kmeans, "
                                          "got 'random'"):
        residual(tiny_bert, mvr_view_init="random")
    with pytest.raises(ConfigError, match="--mvr_view_init segments applies to --mvr_views residual or region "
                                          "only") as err:
        build("mvr", tiny_bert, mvr_view_init="segments")  # the paper's views
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="--mvr_view_init belongs to mvr, not --model_name dpr"):
        refuse_foreign_options(["--model_name", "dpr", "--mvr_view_init", "sentences"], "dpr")
    with pytest.raises(ConfigError, match="--mvr_view_init belongs to mvr, not --model_name dcsr"):
        refuse_foreign_options(["--model_name", "dcsr", "--mvr_view_init=kmeans"], "dcsr")


# ------------------------ segment views + MVR viewers (--mvr_views region) and its viewers-off ablation (issue 37)
def region(backbone, **kwargs):
    kwargs.setdefault("mvr_view_init", "segments")
    return build("mvr", backbone, mvr_views="region", pooling="mean", normalize=True, **kwargs).eval()


def test_region_form_computes_exactly_what_residual_with_a_region_init_computed(tiny_bert):
    """Old saved models (--mvr_views residual --mvr_view_init segments) and the named form are the same model."""
    named = region(tiny_bert, mvr_num_views=3)
    old = residual(tiny_bert, mvr_num_views=3, normalize=True, mvr_view_init="segments")
    old.load_state_dict(named.state_dict())
    with torch.no_grad():
        named.view_gates.fill_(0.3)
        old.view_gates.fill_(0.3)
        batch = named.formatter.passages(SENTENCE_TEXTS)
        torch.testing.assert_close(named.encode_passage(batch)[0], old.encode_passage(batch)[0])
    assert named.options.viewers == "on" and old.options.viewers == "on"


def test_viewers_off_views_are_exactly_the_region_means_and_there_are_no_gates(tiny_bert):
    from multiview_plugin.modeling.mvr import segment_mask

    k = 3
    off = region(tiny_bert, mvr_num_views=k, mvr_viewers="off")
    on = region(tiny_bert, mvr_num_views=k)
    assert not hasattr(off, "view_gates") and "view_gates" not in dict(off.named_parameters())
    assert off.learning_rate_overrides() == {}
    batch = off.formatter.passages(SENTENCE_TEXTS)
    dpr_batch = build("dpr", tiny_bert, pooling="mean").formatter.passages(SENTENCE_TEXTS)
    assert torch.equal(batch["input_ids"], dpr_batch["input_ids"])  # no viewer tokens read
    with torch.no_grad():
        views, _ = off.encode_passage(batch)
        text_states = off.p_encoder(input_ids=dpr_batch["input_ids"],
                                    attention_mask=dpr_batch["attention_mask"]).last_hidden_state
        on.load_state_dict(off.state_dict(), strict=False)
        on.view_gates.fill_(0.5)
        with_viewers, _ = on.encode_passage(on.formatter.passages(SENTENCE_TEXTS))
    members = segment_mask(dpr_batch["attention_mask"].bool(), k)
    for b in range(len(SENTENCE_TEXTS)):
        for i in range(k):
            expected = off._finish(text_states[b, members[b, i]].mean(0))
            torch.testing.assert_close(views[b, i], expected, atol=1e-6, rtol=0)
    assert (with_viewers - views).abs().amax() > 1e-3  # the viewers (gates open) move the views; off never does


def test_viewers_off_trains_only_the_backbone(tiny_bert):
    off = region(tiny_bert, mvr_num_views=2, mvr_viewers="off").train()
    off(**distill_batch(off)).loss.backward()
    grads = {n for n, p in off.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert grads and not any("gate" in n for n in grads)
    assert all(n != "view_gates" for n, _ in off.named_parameters())


def test_viewers_off_round_trips_and_is_refused_elsewhere(tiny_bert, tmp_path):
    off = region(tiny_bert, mvr_num_views=2, mvr_viewers="off")
    with torch.no_grad():
        views = off.encode_passage(off.formatter.passages(SENTENCE_TEXTS))[0]
    off.save(tmp_path / "m")
    options = json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"]
    assert options["mvr_viewers"] == "off" and options["mvr_views"] == "region"
    loaded = load_encoder(tmp_path / "m").eval()
    assert loaded.options.viewers == "off" and not hasattr(loaded, "view_gates")
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_passage(loaded.formatter.passages(SENTENCE_TEXTS))[0], views,
                                   atol=1e-6, rtol=0)
    on = region(tiny_bert, mvr_num_views=2)
    on.save(tmp_path / "on")
    assert load_encoder(tmp_path / "on").options.viewers == "on"
    refusals = [
        (dict(mvr_views="residual", mvr_viewers="off"), "--mvr_viewers off is the viewers-off ablation of "
                                                        "--mvr_views region"),
        (dict(mvr_viewers="off"), "--mvr_viewers off is the viewers-off ablation"),  # the paper's form
        (dict(mvr_views="region", mvr_view_init="none"), "--mvr_views region needs --mvr_view_init"),
        (dict(mvr_views="region"), "--mvr_views region needs --mvr_view_init"),
        (dict(mvr_views="region", mvr_view_init="segments", mvr_viewers="maybe"), "--mvr_viewers must be one of"),
        (dict(mvr_views="region", mvr_view_init="segments", mvr_viewers="off", mvr_gate_learning_rate=0.01),
         "--mvr_gate_learning_rate: no viewers or gates"),
    ]
    for flags, message in refusals:
        kwargs = {"pooling": "mean", **flags}
        with pytest.raises(ConfigError, match=message) as err:
            build("mvr", tiny_bert, **kwargs)
        assert "\n" not in str(err.value)


# ------------------------------------------------- a diversity term between a passage's views (issue 32)
def test_view_diversity_loss_hand_computed():
    from multiview_plugin.modeling.mvr import view_diversity_loss

    views = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]],    # cosines 0, 1/√2, 1/√2
                          [[1.0, 0.0], [3.0, 0.0], [-1.0, 0.0]]])  # cosines 1, -1, -1
    first, second = (2 * 0.5 ** 0.5) / 3, -1 / 3
    assert view_diversity_loss(views).item() == pytest.approx((first + second) / 2, abs=1e-6)
    mask = torch.tensor([[True, True, False], [True, True, True]])  # padded views left out
    assert view_diversity_loss(views, mask).item() == pytest.approx((0.0 + second) / 2, abs=1e-6)
    same = torch.ones(1, 4, 2)
    assert view_diversity_loss(same).item() == pytest.approx(1.0)


def test_diversity_weight_changes_the_loss_and_the_gradients(tiny_bert):
    from multiview_plugin.modeling.mvr import view_diversity_loss

    assert MvrOptions().diversity_weight == 0.0
    for form in ({"mvr_views": "residual", "pooling": "mean"}, {}):
        plain = build("mvr", tiny_bert, normalize=True, mvr_num_views=3, **form).train()
        diverse = build("mvr", tiny_bert, normalize=True, mvr_num_views=3, mvr_diversity_weight=0.5, **form).train()
        diverse.load_state_dict(plain.state_dict())
        if plain.residual:
            with torch.no_grad():
                for m in (plain, diverse):
                    m.view_gates.fill_(0.5)
        batch = distill_batch(plain)
        torch.manual_seed(0)
        base = plain(**batch)
        torch.manual_seed(0)
        out = diverse(**batch)
        assert "loss_diversity" not in base.parts
        term = out.parts["loss_diversity"]
        torch.manual_seed(0)
        with torch.no_grad():
            diverse.encode_query(batch["query"])
            views, mask = diverse.encode_passage(batch["passage"])
        assert term.item() == pytest.approx(view_diversity_loss(views, mask).item(), abs=1e-6)
        assert 0 < term.item() <= 1
        assert out.loss.item() == pytest.approx(base.loss.item() + 0.5 * term.item(), abs=1e-6)
        embeddings = [m.query_encoder.get_input_embeddings().weight for m in (plain, diverse)]
        rows = plain.tokenizer.convert_tokens_to_ids(viewer_tokens(3))
        got = torch.autograd.grad(out.loss, embeddings[1])[0][rows]
        want = torch.autograd.grad(base.loss, embeddings[0])[0][rows]
        assert not torch.allclose(got, want)  # the term moves the viewers
        if plain.residual:
            torch.manual_seed(0)
            out = diverse(**batch)
            torch.manual_seed(0)
            base = plain(**batch)
            assert not torch.allclose(torch.autograd.grad(out.loss, diverse.view_gates)[0],
                                      torch.autograd.grad(base.loss, plain.view_gates)[0])


def test_diversity_weight_round_trips_and_is_validated(tiny_bert, tmp_path):
    from multiview_plugin.arguments import refuse_foreign_options

    model = residual(tiny_bert, mvr_num_views=2, mvr_diversity_weight=0.25)
    model.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "multiview_config.json").read_text())["options"][
        "mvr_diversity_weight"] == 0.25
    assert load_encoder(tmp_path / "m").options.diversity_weight == 0.25
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="--mvr_diversity_weight must be a finite number >= 0") as err:
            residual(tiny_bert, mvr_diversity_weight=bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="--mvr_diversity_weight 0.1 needs --mvr_num_views >= 2"):
        residual(tiny_bert, mvr_num_views=1, mvr_diversity_weight=0.1)
    with pytest.raises(ConfigError, match="--mvr_diversity_weight belongs to mvr, not --model_name dpr"):
        refuse_foreign_options(["--model_name", "dpr", "--mvr_diversity_weight", "0.1"], "dpr")


# --------------------------------------- a staged start from a trained model (issue 32): --mvr_init_from
def trained_like(model, seed=3):
    """``model`` with every backbone weight moved, as training would, so a copy of it is recognisable."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.query_encoder.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    return model


def backbone_weights(model):
    """The backbone's weights except the word embeddings (which grow by the viewer tokens)."""
    return {k: v for k, v in model.query_encoder.state_dict().items() if "word_embeddings" not in k}


@pytest.mark.parametrize("source, form", [("dcsr", {"mvr_views": "residual", "pooling": "mean"}),
                                          ("dpr", {})])  # a dpr --pooling cls stage, then the paper form
def test_init_from_loads_the_backbone_of_the_model_it_names(tiny_bert, tmp_path, source, form):
    extra = {"dcsr_sentence_pooling": "mean", "pooling": "mean"} if source == "dcsr" else {"pooling": "cls"}
    stage = trained_like(build(source, tiny_bert, normalize=True, **extra))
    stage.save(tmp_path / "stage")
    model = build("mvr", tiny_bert, normalize=True, mvr_num_views=3, mvr_init_from=str(tmp_path / "stage"), **form)
    fresh = build("mvr", tiny_bert, normalize=True, mvr_num_views=3, **form)
    want = backbone_weights(stage)
    for name, value in backbone_weights(model).items():
        assert torch.equal(value, want[name]), name
    assert not all(torch.equal(v, backbone_weights(fresh)[k]) for k, v in backbone_weights(model).items())
    words = model.query_encoder.get_input_embeddings().weight
    stage_words = stage.query_encoder.get_input_embeddings().weight
    vocabulary = len(stage.tokenizer)
    assert torch.equal(words[:vocabulary], stage_words[:vocabulary])  # the checkpoint's vocabulary, as trained
    assert len(model.tokenizer) == len(stage.tokenizer) + 4  # + [VIE] [VIE1..3]
    assert model.config.options.init_from == str(tmp_path / "stage")
    if model.residual:  # the residual views start as the stage's passage vector
        with torch.no_grad():
            views, _ = model.encode_passage(model.formatter.passages(TEXTS))
            text_vectors = dpr_vectors(tmp_path / "stage", tiny_bert, TEXTS)
        torch.testing.assert_close(views[:, 0], text_vectors, atol=1e-5, rtol=0)
    model.save(tmp_path / "mvr")  # saved with the path it came from; reloads without that folder
    import shutil

    shutil.rmtree(tmp_path / "stage")
    loaded = load_encoder(tmp_path / "mvr")
    assert loaded.options.init_from == str(tmp_path / "stage")
    assert all(torch.equal(v, want[k]) for k, v in backbone_weights(loaded).items())


def dpr_vectors(folder, tiny_bert, texts):
    """The mean-pooled normalised passage vectors of the backbone saved in ``folder`` (dpr's)."""
    from multiview_plugin.modeling.persistence import load_backbone, load_tokenizer

    backbone, tokenizer = load_backbone(folder), load_tokenizer(folder)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    hidden = backbone(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def test_init_from_refuses_what_it_cannot_start_from_in_one_line(tiny_bert, tmp_path):
    from multiview_plugin.arguments import refuse_foreign_options

    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "empty", tiny_bert, tmp_path / "missing"):  # a plain HF backbone is no saved model
        with pytest.raises(ConfigError, match=rf"^--mvr_init_from {folder}: not a model folder saved by this "
                                              r"package \(no multiview_config.json there\)$"):
            residual(tiny_bert, mvr_init_from=str(folder))
    residual(tiny_bert, mvr_num_views=2).save(tmp_path / "mvr")
    with pytest.raises(ConfigError, match="holds an mvr model already"):
        residual(tiny_bert, mvr_init_from=str(tmp_path / "mvr"))
    build("dpr", tiny_bert, pooling="mean", untie_encoder=True).save(tmp_path / "untied")
    with pytest.raises(ConfigError, match="has separate query and passage encoders: add --untie_encoder"):
        residual(tiny_bert, mvr_init_from=str(tmp_path / "untied"))
    untied = residual(tiny_bert, mvr_num_views=2, untie_encoder=True, mvr_init_from=str(tmp_path / "untied"))
    assert untied.passage_encoder is not None
    with pytest.raises(ConfigError, match="--mvr_init_from belongs to mvr, not --model_name dpr"):
        refuse_foreign_options(["--model_name", "dpr", "--mvr_init_from", str(tmp_path / "mvr")], "dpr")


def test_init_from_through_the_train_driver(tiny_bert, tmp_path):
    """``--mvr_init_from`` as the train driver parses and builds it (the quickstart's --train_flags)."""
    from multiview_plugin.arguments import DataArguments, DevArguments, ModelArguments, MultiViewTrainingArguments
    from multiview_plugin.cli import parse_dataclasses
    from multiview_plugin.driver import train

    stage = trained_like(build("dcsr", tiny_bert, normalize=True, pooling="mean", dcsr_sentence_pooling="mean"))
    stage.save(tmp_path / "stage")
    argv = ["--model_name", "mvr", "--model_name_or_path", str(tiny_bert), "--output_dir", str(tmp_path / "out"),
            "--mvr_views", "residual", "--pooling", "mean", "--mvr_num_views", "2",
            "--mvr_init_from", str(tmp_path / "stage"), "--mvr_view_init", "kmeans", "--mvr_diversity_weight", "0.1"]
    model_args, data_args, _, _ = parse_dataclasses(
        (ModelArguments, DataArguments, DevArguments, MultiViewTrainingArguments), argv, driver="train")
    model = train.build_model(model_args, data_args)
    assert (model.options.init_from, model.options.view_init, model.options.diversity_weight) == (
        str(tmp_path / "stage"), "kmeans", 0.1)
    assert all(torch.equal(v, backbone_weights(stage)[k]) for k, v in backbone_weights(model).items())


def test_temperature_below_the_annealing_floor_is_refused(tiny_bert):
    from multiview_plugin.errors import ConfigError

    args = dict(model_name_or_path=str(tiny_bert), model_name="mvr", temperature=0.1,
                temperature_schedule="annealed", mvr_min_temperature=0.3)
    with pytest.raises(ConfigError, match=r"--temperature 0.1 is below --mvr_min_temperature 0.3"):
        get_encoder_class("mvr").build(ModelArguments(**args), DataArguments())
    args["mvr_min_temperature"] = 0.05  # below the start: the schedule anneals from 0.1 to 0.05
    assert get_encoder_class("mvr").build(ModelArguments(**args), DataArguments()).temperature == pytest.approx(0.1)
