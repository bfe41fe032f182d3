"""Persistence of encoders: the model folder's layout, saving, loading, and the LoRA weights of a resumed run.

A model folder holds the HF backbone weights (root, or ``query_model/`` and ``passage_model/`` when untied, like
Tevatron), the tokenizer with any added special tokens, ``multiview_config.json``
(:class:`~multiview_plugin.modeling.config.EncoderConfig`), and ``multiview_extra.safetensors`` for parameters
that live outside the backbones (mvr's view gates, mlr's scalar mix). A ``--lora`` run's folder holds the merged
backbone plus the adapters in ``lora_adapter/`` (:mod:`multiview_plugin.modeling.lora`).

:class:`PersistenceMixin` gives every encoder ``save`` / ``from_saved`` / ``load_weights``; :func:`load_encoder`
rebuilds any registered encoder from a folder. :mod:`multiview_plugin.modeling.base` re-exports these names.

Every Hugging Face load goes through :func:`from_pretrained`: ``trust_remote_code=False``, and a model folder
(or config) that asks to run its own code (an ``auto_map`` in ``config.json`` or ``tokenizer_config.json``) is
refused in one line, never prompted for, and never loaded as a built-in class it only resembles.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoModel,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    T5EncoderModel,
)

from multiview_plugin.backbones import resolve_backbone
from multiview_plugin.errors import ConfigError, MultiViewError, unsafe_weights_message
from multiview_plugin.modeling.config import (  # the folder's file names live with its config
    CONFIG_NAME,
    EXTRA_WEIGHTS_NAME,
    PASSAGE_SUBDIR,
    QUERY_SUBDIR,
    EncoderConfig,
    is_multiview_model,
)
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.text_options import OPTION_NAMES

logger = logging.getLogger("multiview_plugin.modeling.base")

T5_MODEL_TYPES = ("t5", "mt5", "umt5")
# the files in which a model folder maps transformers' Auto classes to its own code
CODE_MAPS = ("config.json", "tokenizer_config.json")

Loaded = TypeVar("Loaded")


def custom_code_error(where: str | os.PathLike, auto_map: Any) -> ConfigError:
    return ConfigError(f"{where}: field 'auto_map' asks to run the model's own code ({auto_map}); multiview_plugin "
                       "loads only transformers' built-in model classes (trust_remote_code=False): use a model "
                       "without custom code")


def refuse_custom_code(path: str | os.PathLike) -> None:
    """Refuse a local model folder (or config file) whose ``config.json`` or ``tokenizer_config.json`` has an
    ``auto_map``. transformers would ask to run that code, or, for a known ``model_type``, load its built-in
    class in its place (e.g. plain BERT for a custom BERT variant): silently another model."""
    folder = Path(path)
    files = [folder] if folder.is_file() else [folder / name for name in CODE_MAPS] if folder.is_dir() else []
    for file in files:
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # transformers reports an unreadable file itself
        if isinstance(data, dict) and data.get("auto_map"):
            raise custom_code_error(file, data["auto_map"])


def unsafe_weights_error(path: str | os.PathLike, err: BaseException) -> ConfigError:
    """:func:`~multiview_plugin.errors.unsafe_weights_message` as an error."""
    return ConfigError(unsafe_weights_message(path, err))


def from_pretrained(cls: type[Loaded], path: str | os.PathLike, **kwargs: Any) -> Loaded:
    """``cls.from_pretrained(path, trust_remote_code=False, **kwargs)`` for any transformers Auto or model class,
    after :func:`refuse_custom_code`. A hub model whose config maps classes to its own code is refused too (its
    config is read first), and transformers' own refusal becomes one line."""
    refuse_custom_code(path)
    try:
        loaded = cls.from_pretrained(path, trust_remote_code=False, **kwargs)
    except pickle.UnpicklingError as err:  # torch.load(weights_only=True) refused a pickle naming code
        raise unsafe_weights_error(path, err) from None
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise custom_code_error(path, "transformers: it contains custom code") from None
    config = loaded if isinstance(loaded, PretrainedConfig) else getattr(loaded, "config", None)
    auto_map = getattr(config, "auto_map", None) or (getattr(loaded, "init_kwargs", None) or {}).get("auto_map")
    if auto_map:
        raise custom_code_error(path, auto_map)
    return loaded


def load_tokenizer(path: str | os.PathLike, **kwargs: Any) -> PreTrainedTokenizerBase:
    """The tokenizer; one without a pad token pads with its eos token (as Tevatron does for decoder models)."""
    tokenizer = from_pretrained(AutoTokenizer, path, **{k: v for k, v in kwargs.items() if v is not None})
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_backbone(path: str | os.PathLike, config_name: str | os.PathLike | None = None,
                  **kwargs: Any) -> PreTrainedModel:
    """The encoder of a checkpoint: ``AutoModel``, or ``T5EncoderModel`` for T5-family models (their
    ``AutoModel`` is the whole encoder-decoder). ``config_name`` (``--config_name``): build it with that
    config (a folder, ``config.json`` file or hub id) instead of the checkpoint's own, as the Hugging Face
    examples do."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    hub = {k: v for k, v in kwargs.items() if k in ("cache_dir", "revision")}
    if config_name is None:
        config = from_pretrained(AutoConfig, path, **hub)
    else:
        try:
            config = from_pretrained(AutoConfig, config_name, **hub)
        except ConfigError:
            raise
        except (OSError, ValueError) as err:
            raise ConfigError(f"--config_name {config_name}: no model config there "
                              f"({str(err).strip().splitlines()[0]})") from None
        kwargs["config"] = config
    if config.model_type in T5_MODEL_TYPES:
        return from_pretrained(T5EncoderModel, path, **kwargs)
    return from_pretrained(AutoModel, path, **kwargs)


class PersistenceMixin:
    """Saving and loading for :class:`~multiview_plugin.modeling.base.MultiViewEncoder` (an ``nn.Module`` with
    ``config``, ``query_encoder``, ``passage_encoder`` (None when tied) and ``tokenizer``)."""

    def _encoder_folders(self, out: Path) -> list[tuple[PreTrainedModel, Path]]:
        if self.passage_encoder is None:
            return [(self.query_encoder, out)]
        return [(self.query_encoder, out / QUERY_SUBDIR), (self.passage_encoder, out / PASSAGE_SUBDIR)]

    def save(self, output_dir: str | os.PathLike) -> None:
        """Write weights, tokenizer and ``multiview_config.json`` so :func:`load_encoder` rebuilds this model.

        A LoRA model writes its backbones with the adapters merged (an ordinary model folder, computed without
        touching the training weights) and the adapters themselves in ``lora_adapter/``.
        """
        from multiview_plugin.modeling.lora import adapter_folders, is_lora, save_adapter, save_merged_backbone

        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for encoder, folder in self._encoder_folders(out):
            if is_lora(encoder):
                save_merged_backbone(encoder, folder)
            else:
                encoder.save_pretrained(folder)
        self.tokenizer.save_pretrained(out)
        extra = self.extra_state_dict()
        if extra:
            save_file({k: v.detach().contiguous().cpu() for k, v in extra.items()}, str(out / EXTRA_WEIGHTS_NAME))
        if self.is_lora:
            for attribute, folder in adapter_folders(out, untied=self.passage_encoder is not None).items():
                save_adapter(getattr(self, attribute), folder)
        # The config goes last: a folder that has it is complete.
        self.config.save(out)

    def extra_state_dict(self) -> dict[str, torch.Tensor]:
        """Parameters and buffers outside the backbones (saved in ``multiview_extra.safetensors``)."""
        return {k: v for k, v in self.state_dict().items()
                if not k.startswith(("query_encoder.", "passage_encoder."))}

    def load_weights(self, folder: str | os.PathLike) -> None:
        """Load the weights saved by :meth:`save` into this (already built) model. A LoRA model (resuming) loads
        the adapters from ``lora_adapter/`` and the parameters outside the backbones, not the merged backbone."""
        if self.is_lora:
            self._load_lora_weights(Path(folder))
            return
        fresh = load_encoder(folder)
        missing, unexpected = self.load_state_dict(fresh.state_dict(), strict=False)
        if missing or unexpected:
            raise ConfigError(f"{folder}: weights do not fit this model (missing {missing}, unexpected {unexpected})")
        self.config = fresh.config

    def _load_lora_weights(self, folder: Path) -> None:
        from multiview_plugin.modeling.lora import OPTION, load_adapter_weights

        config = EncoderConfig.load(folder)
        if OPTION not in config.options:
            raise ConfigError(f"{folder} was not saved by a --lora run (no 'lora' options in its "
                              "multiview_config.json): it cannot resume this LoRA model")
        load_adapter_weights(self, folder)
        self.load_extra_weights(folder, exact=True)
        self.config = config

    def load_extra_weights(self, folder: str | os.PathLike, exact: bool = False) -> list[str]:
        """Load ``multiview_extra.safetensors`` of a saved model folder (the parameters outside the backbones)
        into this model; returns their names. Names this model lacks are an error; with ``exact``, so is a name
        of :meth:`extra_state_dict` the file lacks (a missing file counts as empty)."""
        path = Path(folder) / EXTRA_WEIGHTS_NAME
        extra = load_file(str(path)) if path.is_file() else {}
        expected = set(self.extra_state_dict())
        missing, unexpected = sorted(expected - set(extra)) if exact else [], sorted(set(extra) - expected)
        if missing or unexpected:
            raise ConfigError(f"{path}: weights do not fit this model (missing {missing}, unexpected {unexpected})")
        if extra:  # strict=False: the backbone weights are not in this file
            self.load_state_dict(extra, strict=False)
        return sorted(extra)

    @classmethod
    def from_saved(cls, folder: str | os.PathLike, config: EncoderConfig, **hf_kwargs: Any) -> Any:
        """Load a saved model; ``hf_kwargs`` go to the backbones' ``from_pretrained`` (e.g. attn_implementation)."""
        folder = Path(folder)
        tokenizer = load_tokenizer(folder)
        if config.untie_encoder:
            query_encoder = load_backbone(folder / QUERY_SUBDIR, **hf_kwargs)
            passage_encoder = load_backbone(folder / PASSAGE_SUBDIR, **hf_kwargs)
        else:
            query_encoder = passage_encoder = load_backbone(folder, **hf_kwargs)
        model = cls(config, query_encoder, passage_encoder, tokenizer)
        model.load_extra_weights(folder)
        return model


def load_encoder(folder: str | os.PathLike, checkpoint_options: dict[str, Any] | None = None,
                 **hf_kwargs: Any) -> Any:
    """Rebuild any registered encoder from a folder written by :meth:`PersistenceMixin.save`.

    A plain Hugging Face / Tevatron checkpoint (no ``multiview_config.json``) loads as ``dpr`` when
    ``checkpoint_options`` gives its :class:`EncoderConfig` fields (pooling, normalize, lengths, ...), as
    Tevatron's encoder takes them from flags; without them it is an error. ``hf_kwargs`` go to
    ``from_pretrained`` (``attn_implementation``, ``dtype``).

    Examples
    --------
    >>> model = load_encoder("runs/mvr")           # doctest: +SKIP
    >>> q = model.encode_query(model.formatter.queries(["who wrote hamlet"]))  # doctest: +SKIP
    """
    check_model_path(folder)
    if checkpoint_options is not None and not is_multiview_model(folder):
        config = EncoderConfig(model_name="dpr", backbone=str(folder), **checkpoint_options)
        cls = get_encoder_class("dpr")
        cls.validate_config(config)
        logger.info("%s has no multiview_config.json: loading it as a dpr model (pooling %s, normalize %s)",
                    folder, config.pooling, config.normalize)
    else:
        config = EncoderConfig.load(folder)
        cls = get_encoder_class(config.model_name)
    try:
        return cls.from_saved(folder, config, **hf_kwargs)
    except (OSError, ValueError) as err:
        if Path(folder).exists() or isinstance(err, MultiViewError):
            raise
        reason = " ".join(str(err).split())[:160]  # a hub id that cannot be loaded here: one line, not the hub's
        raise ConfigError(f"{folder}: no such model folder, and no Hugging Face hub model of that name could be "
                          f"loaded ({reason}); {EXPECTED_MODEL}") from None


EXPECTED_MODEL = ("expected a folder written by multiview_plugin's train driver (multiview_config.json) or a Hugging "
                  "Face checkpoint folder (config.json and its weights)")


def check_model_path(folder: str | os.PathLike) -> None:
    """One line naming ``folder`` and what a model folder holds, for a path that cannot be one: a file, a folder
    with neither ``multiview_config.json`` nor ``config.json`` (e.g. empty), or a missing path that is not a hub
    id (absolute, relative with ``.``, or of more than two parts). A missing path of hub-id form is left to the
    hub (its failure is one line too, :func:`load_encoder`)."""
    path = Path(folder)
    if path.is_file():
        raise ConfigError(f"{folder} is a file; {EXPECTED_MODEL}")
    if path.is_dir():
        if not (path / CONFIG_NAME).is_file() and not (path / "config.json").is_file():
            what = "an empty folder" if not any(path.iterdir()) else f"holds neither {CONFIG_NAME} nor config.json"
            raise ConfigError(f"{folder}: {what}; {EXPECTED_MODEL}")
        return
    text = str(folder)
    if not _HUB_ID.fullmatch(text):
        raise ConfigError(f"{folder}: no such folder; {EXPECTED_MODEL}")


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # 'name' or 'namespace/name'


def load_adapter_model(folder: str | os.PathLike, is_trainable: bool = False, **hf_kwargs: Any) -> Any:
    """A LoRA-trained model folder rebuilt the peft way: the original backbone (``config.backbone``) with its
    vocabulary resized to the saved tokenizer's (the added tokens' rows come from the adapter's trainable tokens),
    the saved adapter(s) loaded on top, unmerged, and the parameters outside the backbone from the folder. It
    scores as the folder's merged weights do (up to rounding). ``hf_kwargs`` go to the backbone's
    ``from_pretrained``."""
    from multiview_plugin.modeling.lora import OPTION, adapter_folders, check_adapter_config, require_peft

    peft = require_peft()
    config = EncoderConfig.load(folder)
    if OPTION not in config.options:
        raise ConfigError(f"{folder} was not trained with LoRA (its multiview_config.json has no 'lora' options)")
    tokenizer = load_tokenizer(folder)
    query_encoder = load_backbone(resolve_backbone(config.backbone), **hf_kwargs)
    if query_encoder.get_input_embeddings().weight.shape[0] < len(tokenizer):
        query_encoder.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    passage_encoder = copy.deepcopy(query_encoder) if config.untie_encoder else query_encoder
    model = get_encoder_class(config.model_name)(config, query_encoder, passage_encoder, tokenizer)
    for attribute, path in adapter_folders(folder, untied=config.untie_encoder).items():
        check_adapter_config(path)
        setattr(model, attribute, peft.PeftModel.from_pretrained(getattr(model, attribute), str(path),
                                                                 is_trainable=is_trainable))
    model.load_extra_weights(folder)
    return model

def override_text_options(model: Any, overrides: Mapping[str, Any]) -> None:
    """Set the shared text options in ``overrides`` (:mod:`multiview_plugin.text_options`; None values are "not
    given" and skipped) on a loaded model's config, each logged, then validate the config again: the encode
    driver's ``--normalize False`` on a model saved with ``normalize``, or ``MultiViewModel.load(path,
    normalize=False)``."""
    for name, value in overrides.items():
        if name not in OPTION_NAMES:
            raise ConfigError(f"{name!r} is not a shared text option; expected one of {', '.join(OPTION_NAMES)}")
        if value is None:
            continue
        own = getattr(model.config, name)
        if own != value:
            logger.info("--%s %r overrides the saved model's %r", name, value, own)
            setattr(model.config, name, value)
        else:
            logger.info("--%s %r: the saved model's own setting", name, value)
    type(model).validate_config(model.config)
