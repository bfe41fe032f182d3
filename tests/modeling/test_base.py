"""multiview_plugin.modeling.base: the annealed temperature schedule's floor is refused above --temperature with
advice that applies to the chosen method (mvr: its --mvr_min_temperature; the others have no flag for it)."""

from __future__ import annotations

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.errors import ConfigError
from multiview_plugin.registry import get_encoder_class


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
