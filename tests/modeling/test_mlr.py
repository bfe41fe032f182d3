"""MLR (Multi-Layer Representations): four poolings of the layers, BERT and T5."""

import math
import pickle

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.errors import ConfigError
from multiview_plugin.losses import SelfContrastiveLoss
from multiview_plugin.modeling import load_encoder
from multiview_plugin.modeling.mlr import default_layers, parse_layers
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS, make_tiny_t5

TEXTS = ["paris is the capital of france", "the moon", "a cat is a small animal and a dog is a large one"]


def build(name, path, **kw):
    torch.manual_seed(0)
    return get_encoder_class(name).build(ModelArguments(model_name_or_path=str(path), model_name=name, **kw),
                                         DataArguments(passage_max_len=32, query_max_len=16))


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    return make_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))


def test_default_and_validated_layers():
    assert default_layers(12, "max") == [12, 11, 10, 9]
    assert default_layers(12, "self_contrastive") == [12, 10]
    assert default_layers(6, "self_contrastive") == [6, 5]  # MiniLM-L6
    assert parse_layers("10,12", 12, "max") == [12, 10]  # last layer moved first
    with pytest.raises(ConfigError, match="must include the last layer"):
        parse_layers("10,11", 12, "max")
    with pytest.raises(ConfigError, match="outside the backbone's layers 0..12"):
        parse_layers("12,13", 12, "max")


def test_layer_vectors_are_the_selected_hidden_states(tiny_bert):
    model = build("mlr", tiny_bert, mlr_pooling="max", mlr_layers="0,2").eval()
    assert model.layers == [2, 0]
    batch = model.formatter.passages(TEXTS)
    states = model.query_encoder(**batch, output_hidden_states=True).hidden_states
    reps, mask = model.encode_passage(batch)
    assert reps.shape == (3, 2, 32) and mask.all()
    assert torch.allclose(reps[:, 0], states[2][:, 0]) and torch.allclose(reps[:, 1], states[0][:, 0])
    assert torch.allclose(model.encode_query(model.formatter.queries(["what is paris"])),
                          model.query_encoder(**model.formatter.queries(["what is paris"])).last_hidden_state[:, 0])
    assert not model.is_single_vector()


def test_self_contrastive_loss_hand_computed_and_training_scores():
    # 2 queries x 3 passages x 2 layers (last layer first); positives at 0 and 2
    scores = torch.tensor([[[1.0, 2.0], [0.5, 3.0], [0.2, 0.1]],
                           [[0.0, 1.5], [1.0, 0.4], [0.3, 0.9]]])
    tau, tau_r, lam = 0.5, 2.0, 0.3
    out = SelfContrastiveLoss(lam=lam, reg_temperature=tau_r)(scores, torch.tensor([0, 2]), tau)
    # query 0: positive uses its last layer (1.0), negatives their max (3.0, 0.2)
    ce0 = math.log(math.exp(1.0 / tau) + math.exp(3.0 / tau) + math.exp(0.2 / tau)) - 1.0 / tau
    # query 1: positive = passage 2's last layer (0.3); negatives max: 1.5, 1.0
    ce1 = math.log(math.exp(1.5 / tau) + math.exp(1.0 / tau) + math.exp(0.3 / tau)) - 0.3 / tau
    reg0 = math.log(math.exp(1.0 / tau_r) + math.exp(2.0 / tau_r)) - 1.0 / tau_r
    reg1 = math.log(math.exp(0.3 / tau_r) + math.exp(0.9 / tau_r)) - 0.3 / tau_r
    assert out.parts["loss_ce"].item() == pytest.approx((ce0 + ce1) / 2, abs=1e-6)
    assert out.parts["loss_reg"].item() == pytest.approx((reg0 + reg1) / 2, abs=1e-6)
    assert out.loss.item() == pytest.approx((ce0 + ce1) / 2 + lam * (reg0 + reg1) / 2, abs=1e-6)


def test_self_contrastive_model_trains_on_layers_and_indexes_last(tiny_bert, tmp_path):
    model = build("mlr", tiny_bert, mlr_layers="2,1")
    assert model.config.loss_name == "mlr_self_contrastive" and model.is_single_vector()
    reps, mask = model.encode_passage(model.formatter.passages(TEXTS))
    assert reps.shape == (3, 2, 32)  # training sees both layers
    kept, kept_mask = model.index_views(reps, mask)
    assert torch.equal(kept, reps[:, :1]) and kept_mask.shape == (3, 1)
    # its shards are Tevatron's exact single-vector layout
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(f'{{"docid": "d{i}", "text": "{t}"}}\n' for i, (_, _, t) in enumerate(TOPICS)))
    encode_to_shard(model.eval(), str(corpus), tmp_path / "s.pkl")
    with open(tmp_path / "s.pkl", "rb") as f:
        arr, lookup = pickle.load(f)
    assert arr.shape == (8, 32) and lookup == [f"d{i}" for i in range(8)]


def test_average_and_scalar_mix(tiny_bert, tmp_path):
    avg = build("mlr", tiny_bert, mlr_pooling="average", mlr_layers="2,1", normalize=True).eval()
    batch = avg.formatter.passages(TEXTS)
    layers = avg.layer_vectors(batch)
    expected = torch.nn.functional.normalize(layers.mean(1), dim=-1)
    assert torch.allclose(avg.encode_passage(batch)[0][:, 0], expected, atol=1e-6)

    mix = build("mlr", tiny_bert, mlr_pooling="scalar_mix", mlr_layers="2,1,0")
    assert mix.mix_weights.shape == (3,) and torch.equal(mix.mix_weights, torch.zeros(3))
    optim = torch.optim.SGD(mix.parameters(), lr=1.0)
    f = mix.formatter
    out = mix(query=f.queries(["what is paris", "what is the moon"]), passage=f.passages(TEXTS[:2] * 2))
    out.loss.backward()
    optim.step()
    assert not torch.equal(mix.mix_weights, torch.zeros(3))  # learned
    mix.save(tmp_path / "mix")
    assert (tmp_path / "mix" / "multiview_extra.safetensors").is_file()
    loaded = load_encoder(tmp_path / "mix").eval()
    assert torch.equal(loaded.mix_weights, mix.mix_weights)
    with torch.no_grad():
        assert torch.allclose(loaded.encode_passage(batch)[0], mix.eval().encode_passage(batch)[0])


def test_t5_layer_means_respect_padding(tiny_t5):
    model = build("mlr", tiny_t5, mlr_pooling="max").eval()
    assert model.is_t5 and model.layers == [3, 2, 1]
    short = "paris is the capital"
    alone = model.formatter.passages([short])
    padded = model.formatter.passages([short, " ".join(["the old city of paris"] * 5)])
    assert alone["input_ids"].shape[1] < padded["input_ids"].shape[1]
    with torch.no_grad():
        a, _ = model.encode_passage(alone)
        b, _ = model.encode_passage(padded)
        states = model.query_encoder(**alone, output_hidden_states=True).hidden_states
    assert torch.allclose(a[0], b[0], atol=1e-5)  # padding does not leak into the means
    # intermediate layers pass through the encoder's final layer norm, like the last one
    normed = model.query_encoder.encoder.final_layer_norm(states[2][0])
    assert torch.allclose(a[0, 1], normed.mean(0), atol=1e-6)
