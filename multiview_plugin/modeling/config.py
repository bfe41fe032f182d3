"""The saved description of a trained model: ``multiview_config.json``.

It records everything needed to rebuild the encoder and encode exactly as in training: the method, the loss,
the shared text options (pooling, normalisation, lengths, prefixes, tokenisation: their defaults come from
:class:`~multiview_plugin.text_options.TextOptions`), the temperature schedule, tied or untied encoders and every
method option (the method's typed options, :mod:`multiview_plugin.modeling.options`, saved under ``options``
with their flag names).

Sizes (lengths, padding multiple, the methods' view and negative counts) are bounded
(:mod:`multiview_plugin.bounds`): a file asking for ``mvr_num_views`` = 10**9 is refused in one line naming the
file, the field, the value and the allowed range, before anything is built from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from multiview_plugin.atomic import atomic_open
from multiview_plugin.bounds import OutOfBoundsError, check_fields
from multiview_plugin.errors import ConfigError, UnknownNameError
from multiview_plugin.modeling.options import MethodOptions
from multiview_plugin.text_options import MASK_DUPLICATE_POSITIVES, TEMPERATURE, UNTIE_ENCODER, config_field

CONFIG_NAME = "multiview_config.json"
# the other files of a model folder (modeling/persistence.py writes them): the parameters outside the backbones,
# and the two backbones' folders of an untied model
EXTRA_WEIGHTS_NAME = "multiview_extra.safetensors"
QUERY_SUBDIR, PASSAGE_SUBDIR = "query_model", "passage_model"
FORMAT_VERSION = 1


@dataclass
class EncoderConfig:
    model_name: str
    backbone: str
    loss_name: str | None = None
    pooling: str = config_field("pooling")
    normalize: bool = config_field("normalize")
    temperature: float = TEMPERATURE
    temperature_schedule: str = "fixed"
    untie_encoder: bool = UNTIE_ENCODER
    query_max_len: int = config_field("query_max_len")
    passage_max_len: int = config_field("passage_max_len")
    query_prefix: str = config_field("query_prefix")
    passage_prefix: str = config_field("passage_prefix")
    # None: 16 on GPU, none on CPU (decided when formatting); 0: none
    pad_to_multiple_of: int | None = config_field("pad_to_multiple_of")
    # training only: drop in-batch copies of a query's positive
    mask_duplicate_positives: bool = MASK_DUPLICATE_POSITIVES
    # Tevatron's tokenisation options (dpr only): pad on the left, end every text with the eos token, or
    # tokenise without the tokenizer's special tokens
    padding_side: str = config_field("padding_side")
    append_eos_token: bool = config_field("append_eos_token")
    add_special_tokens: bool = config_field("add_special_tokens")
    # the method's typed options (its options_class); a dict (the saved form, flag names as keys) is read into them
    options: MethodOptions = field(default_factory=MethodOptions)
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.options, MethodOptions):
            if not isinstance(self.options, (Mapping, type(None))):
                raise ConfigError(f"field 'options' must be an object, got {self.options!r}")
            try:
                self.options = options_class(self.model_name).from_dict(dict(self.options or {}))
            except OutOfBoundsError as err:
                err.section = "options"  # where the field sits in multiview_config.json
                raise
        self.check_bounds()

    def check_bounds(self) -> None:
        """Refuse sizes outside their range (:mod:`multiview_plugin.bounds`); also after fields were set (the
        encode driver's overrides)."""
        check_fields(self)
        check_fields(self.options, self.options.flag_of)

    def to_dict(self) -> dict[str, Any]:
        """The saved form (what ``multiview_config.json`` holds)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["options"] = self.options.to_dict()
        return out

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``multiview_config.json`` atomically into ``folder``."""
        target = Path(folder) / CONFIG_NAME
        with atomic_open(target) as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")
        return target

    @classmethod
    def load(cls, folder: str | os.PathLike) -> EncoderConfig:
        path = Path(folder) / CONFIG_NAME
        if not path.is_file():
            raise ConfigError(f"{folder} is not a multiview_plugin model folder: {CONFIG_NAME} is missing")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON ({err})") from err
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: not a JSON object")
        version = data.get("format_version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise ConfigError(f"{path}: field 'format_version': expected an integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise ConfigError(f"{path}: written by a newer multiview_plugin (format {version})")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown fields {unknown}")
        try:
            return cls(**data)
        except OutOfBoundsError as err:  # before any weight or token is allocated from it
            raise err.located(path) from None
        except (ConfigError, TypeError) as err:  # a wrong-typed options object, a missing field
            raise ConfigError(f"{path}: {err}") from None


def options_class(model_name: str) -> type[MethodOptions]:
    """The typed options class of a registered method (the plain base class for a name not registered: the
    error is raised where the encoder class is needed)."""
    from multiview_plugin.registry import get_encoder_class

    try:
        return getattr(get_encoder_class(model_name), "options_class", MethodOptions)
    except UnknownNameError:
        return MethodOptions


def is_multiview_model(path: str | os.PathLike) -> bool:
    return (Path(path) / CONFIG_NAME).is_file()
