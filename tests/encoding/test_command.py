"""encoding/command.py: the encode command's checks on parsed flags (encoding itself runs through the encode
driver in tests/driver/test_encode.py, Ray encoding in tests/encoding/test_ray_encode.py)."""

from __future__ import annotations

import pytest

from multiview_plugin.driver.encode import EncodeArguments
from multiview_plugin.encoding.command import check_encode_input, given_overrides, refuse_ray_flags, shard_options
from multiview_plugin.errors import ConfigError


def args(**kwargs) -> EncodeArguments:
    return EncodeArguments(**{"model_name_or_path": "m", "dataset_path": "c.jsonl", "encode_output_path": "o.pkl",
                              **kwargs})


@pytest.mark.parametrize("kwargs, message", [
    ({"encode_output_path": None}, "--encode_output_path is required"),
    ({"dataset_path": None}, "--dataset_path is required with --dataset_name json"),
    ({"dataset_split": "dev"}, "only the 'train' split"),
    ({"fp16": True, "bf16": True}, "--fp16 and --bf16 exclude each other"),
])
def test_bad_inputs_are_one_line(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        check_encode_input(args(**kwargs))


def test_good_input_passes():
    check_encode_input(args())


def test_ray_flags_without_an_address_are_refused_even_at_their_default():
    refuse_ray_flags(args())
    with pytest.raises(ConfigError, match="--ray_workers, --ray_timeout configure the Ray encode"):
        refuse_ray_flags(args(ray_workers=0, ray_timeout=5.0))


def test_only_the_text_options_given_override():
    assert given_overrides(args()) == {}
    assert given_overrides(args(pooling="mean", normalize=False)) == {"pooling": "mean", "normalize": False}


def test_shard_options_are_the_same_for_every_shard():
    options = shard_options(args(per_device_eval_batch_size=8))
    assert options["batch_size"] == 8 and options["path"] == "c.jsonl" and options["model_path"] == "m"
