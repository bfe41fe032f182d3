"""The shared encoder base: save → load round trips (tied and untied), tied parameters, the registry and its errors."""

import pytest
import torch
from transformers import AutoModel

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.errors import ConfigError, UnknownNameError
from multiview_plugin.modeling import DprEncoder, MvrEncoder, load_encoder
from multiview_plugin.registry import get_encoder_class

TEXTS = ["paris is the capital of france", "the moon", "a cat is a small animal and a dog is a large one"]


def build(name, path, data_kwargs=None, **model_kwargs):
    data = DataArguments(pad_to_multiple_of=None, **(data_kwargs or {}))
    return get_encoder_class(name).build(ModelArguments(model_name_or_path=str(path), model_name=name,
                                                        **model_kwargs), data)


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
    assert get_encoder_class("mvr") is MvrEncoder
    assert get_encoder_class("dpr") is DprEncoder
    with pytest.raises(UnknownNameError, match="unknown model 'colbert'; known models: .*dpr.*mvr"):
        get_encoder_class("colbert")
    with pytest.raises(ConfigError, match="--mvr_num_views must be >= 1"):
        build("mvr", tiny_bert, mvr_num_views=0)
    with pytest.raises(ConfigError, match="--pooling must be one of cls, first, mean"):
        build("dpr", tiny_bert, pooling="max")
    with pytest.raises(ConfigError, match="not a multiview_plugin model folder"):
        load_encoder(tiny_bert)


# The annealed temperature schedule's floor is refused above --temperature with advice that applies to the chosen
# method (mvr: its --mvr_min_temperature; the others have no flag for it).
def config(name: str, **flags):
    cls = get_encoder_class(name)
    return cls, cls.config_from_args(ModelArguments(model_name_or_path="x", model_name=name, **flags),
                                     DataArguments())


@pytest.mark.parametrize("name", ["dpr", "mlr", "mebert", "dcsr", "dce"])
def test_annealed_floor_advice_for_a_method_without_the_flag(name):
    cls, cfg = config(name, temperature=0.05, temperature_schedule="annealed")
    with pytest.raises(ConfigError) as err:
        cls.validate_config(cfg)
    message = str(err.value)
    assert f"below the floor 0.3 of {name}'s annealed schedule" in message
    assert "raise --temperature to at least 0.3, or use --temperature_schedule fixed" in message
    assert "lower --mvr_min_temperature" not in message  # a flag this method refuses


def test_annealed_floor_advice_for_mvr_names_its_flag():
    cls, cfg = config("mvr", temperature=0.05, temperature_schedule="annealed")
    with pytest.raises(ConfigError, match=r"below --mvr_min_temperature 0.3: .* lower --mvr_min_temperature"):
        cls.validate_config(cfg)
    cls, cfg = config("mvr", temperature=0.05, temperature_schedule="annealed", mvr_min_temperature=0.01)
    cls.validate_config(cfg)  # the floor lowered: accepted


def test_fixed_schedule_has_no_floor():
    cls, cfg = config("dpr", temperature=0.05)
    cls.validate_config(cfg)
