"""Encoders: MVR inputs and shapes, DPR pooling, save → load round trips, registry."""

import pytest
import torch
from transformers import AutoModel

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.errors import ConfigError, UnknownNameError
from multiview_plugin.modeling import DenseEncoder, MultiViewerEncoder, load_encoder
from multiview_plugin.modeling.mvr import QUERY_VIEWER, viewer_tokens
from multiview_plugin.registry import get_encoder_class

TEXTS = ["paris is the capital of france", "the moon", "a cat is a small animal and a dog is a large one"]


def build(name, path, data_kwargs=None, **model_kwargs):
    data = DataArguments(pad_to_multiple_of=None, **(data_kwargs or {}))
    return get_encoder_class(name).build(ModelArguments(model_name_or_path=str(path), model_name=name,
                                                        **model_kwargs), data)


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


def test_dpr_pooling(tiny_bert):
    cls = build("dpr", tiny_bert).eval()
    mean = build("dpr", tiny_bert, pooling="mean", normalize=True).eval()
    batch = cls.formatter.passages(TEXTS)
    hidden = cls.query_encoder(**batch).last_hidden_state
    reps, mask = cls.encode_passage(batch)
    assert reps.shape == (3, 1, 32) and mask.all()
    assert torch.allclose(reps[:, 0], hidden[:, 0])
    m = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)
    assert torch.allclose(mean.encode_passage(batch)[0][:, 0], expected, atol=1e-6)


@pytest.mark.parametrize("name", ["dpr", "mvr"])
@pytest.mark.parametrize("untie", [False, True])
def test_save_load_round_trip(tiny_bert, tmp_path, name, untie):
    model = build(name, tiny_bert, untie_encoder=untie, mvr_num_views=3).eval()
    if untie:  # make the two encoders really differ
        with torch.no_grad():
            for p in model.passage_encoder.parameters():
                p.add_(0.01)
    model.save(tmp_path / "m")
    loaded = load_encoder(tmp_path / "m").eval()
    assert type(loaded) is type(model) and loaded.config == model.config
    assert (tmp_path / "m" / "multiview_config.json").is_file()
    assert (tmp_path / "m" / "query_model").is_dir() == untie
    qb = loaded.formatter.queries(["what is paris"])
    pb = loaded.formatter.passages(TEXTS)
    assert torch.equal(model.formatter.passages(TEXTS)["input_ids"], pb["input_ids"])
    with torch.no_grad():
        assert torch.equal(model.encode_query(qb), loaded.encode_query(qb))
        assert torch.equal(model.encode_passage(pb)[0], loaded.encode_passage(pb)[0])
    if untie:
        same_text = loaded.formatter.passages(["what is paris"])
        assert not torch.equal(loaded.encode_query(qb), loaded.encode_passage(same_text)[0][:, 0])
    # the backbone folder stays a plain HF model
    plain = AutoModel.from_pretrained(tmp_path / "m" / ("passage_model" if untie else ""))
    assert plain.config.hidden_size == 32


def test_tied_encoders_share_parameters(tiny_bert):
    model = build("mvr", tiny_bert, mvr_num_views=2)
    assert model.p_encoder is model.query_encoder
    n_tied = sum(p.numel() for p in model.parameters())
    untied = build("mvr", tiny_bert, mvr_num_views=2, untie_encoder=True)
    assert sum(p.numel() for p in untied.parameters()) == 2 * n_tied


def test_registry_and_bad_options(tiny_bert):
    assert get_encoder_class("mvr") is MultiViewerEncoder
    assert get_encoder_class("dpr") is DenseEncoder
    with pytest.raises(UnknownNameError, match="unknown model 'colbert'; known models: .*dpr.*mvr"):
        get_encoder_class("colbert")
    with pytest.raises(ConfigError, match="--mvr_num_views must be >= 1"):
        build("mvr", tiny_bert, mvr_num_views=0)
    with pytest.raises(ConfigError, match="--pooling must be one of cls, first, mean"):
        build("dpr", tiny_bert, pooling="max")
    with pytest.raises(ConfigError, match="not a multiview_plugin model folder"):
        load_encoder(tiny_bert)


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
