"""training/start.py: what a train run starts from, on plain argument objects (the full runs, the saved-model
refusals and the data loading run through the train driver in tests/driver/test_train.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from multiview_plugin.arguments import DataArguments
from multiview_plugin.errors import ConfigError
from multiview_plugin.training.start import build_model, refuse_encode_only_flags, warn_fp16_without_gpu


def test_encode_only_flags_are_refused_only_with_a_value():
    refuse_encode_only_flags(DataArguments())
    with pytest.raises(ConfigError, match="--encode_is_query True: encoding flag of"):
        refuse_encode_only_flags(DataArguments(encode_is_query=True))


@pytest.mark.parametrize("fp16, device, warned", [(True, "cpu", True), (True, "cuda", False), (False, "cpu", False)])
def test_fp16_is_warned_about_on_cpu_only(caplog, fp16, device, warned):
    args = SimpleNamespace(fp16=fp16, device=SimpleNamespace(type=device))
    with caplog.at_level(logging.WARNING, logger="multiview_plugin.train"):
        warn_fp16_without_gpu(args)
    assert ("--fp16 is ignored on CPU" in caplog.text) is warned


def test_an_unknown_method_fails_before_anything_loads(tmp_path):
    with pytest.raises(Exception, match="nosuch"):
        build_model(SimpleNamespace(model_name="nosuch", model_name_or_path=str(tmp_path)), DataArguments())
