"""LoRA training through peft, with Tevatron v2's flags (``--lora``, ``--lora_name_or_path``, ``--lora_r``,
``--lora_alpha``, ``--lora_dropout``, ``--lora_target_modules``).

A backbone is wrapped in a peft ``PeftModel`` (``LoraConfig(task_type=FEATURE_EXTRACTION)``, as Tevatron's
``EncoderModel.build``). The tokens a method adds to the vocabulary (MVR's viewers, DCSR's ``<sent>``) would
otherwise keep their random embedding rows: they train as peft trainable tokens (``trainable_token_indices``), so
only those rows of the embedding matrix change. Parameters outside the backbones (MVR's residual view gates,
MLR's scalar mix) are not the adapter's business: they train as in full fine-tuning.

On disk a LoRA-trained model folder is a complete ordinary model folder (the backbone weights with every adapter
merged, so every tool and :func:`~multiview_plugin.modeling.persistence.load_encoder` reads it unchanged) plus the
peft adapter in ``lora_adapter/`` (``lora_adapter/query_model`` and ``lora_adapter/passage_model`` for untied
encoders), which is what a resumed run loads. ``multiview_config.json`` records the settings under
``options["lora"]``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from multiview_plugin.bounds import MAX_LORA_RANK, OutOfBoundsError, check_value
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.config import (
    EXTRA_WEIGHTS_NAME,
    PASSAGE_SUBDIR,
    QUERY_SUBDIR,
    EncoderConfig,
    is_multiview_model,
)

# an encoder of modeling/base.py (MultiViewEncoder; that module imports this one, so this one names its base class)
MultiViewEncoder = nn.Module

logger = logging.getLogger(__name__)

LORA_ADAPTER_DIR = "lora_adapter"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTION = "lora"  # the key of EncoderConfig.options that records the LoRA settings
# state-dict key segments of adapter weights (dropped from the merged backbone) and of peft's wrappers (removed)
_ADAPTER_PARTS = {"lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B", "lora_magnitude_vector",
                  "trainable_tokens_delta"}
_WRAPPER_PARTS = {"base_layer", "token_adapter"}


def require_peft() -> Any:
    """The peft module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import peft
    except ImportError as err:
        raise ConfigError("LoRA (--lora, --lora_name_or_path) needs peft: pip install 'multiview_plugin[lora]'") \
            from err
    return peft


def wants_lora(model_args: Any) -> bool:
    """Whether the parsed arguments ask for LoRA training (``--lora`` or ``--lora_name_or_path``)."""
    return bool(getattr(model_args, "lora", False) or getattr(model_args, "lora_name_or_path", None))


def is_lora(encoder: Any) -> bool:
    """True for a backbone wrapped by :func:`apply_lora` (a peft ``PeftModel``)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(encoder, PeftModel)


def parse_target_modules(spec: str | list[str]) -> list[str]:
    """``"query,key, value"`` → ``["query", "key", "value"]`` (Tevatron splits on commas)."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    return [n.strip() for n in names if n.strip()]


def linear_module_names(backbone: nn.Module) -> list[str]:
    """The distinct leaf names of the backbone's Linear layers (what ``--lora_target_modules`` can name)."""
    from transformers.pytorch_utils import Conv1D

    return sorted({name.rsplit(".", 1)[-1] for name, module in backbone.named_modules()
                   if name and isinstance(module, (nn.Linear, Conv1D))})


def check_target_modules(backbone: nn.Module, targets: list[str]) -> None:
    """A one-line error when no module of ``backbone`` has one of the ``targets`` names (peft matches a name
    against the whole module path or its dotted suffix), naming the Linear modules it does have."""
    if not targets:
        raise ConfigError("--lora_target_modules is empty: name the Linear modules that get adapters")
    names = [name for name, _ in backbone.named_modules() if name]
    if any(name == t or name.endswith("." + t) for t in targets for name in names):
        return
    have = linear_module_names(backbone)
    raise ConfigError(f"--lora_target_modules {','.join(targets)}: no module of this {type(backbone).__name__} has "
                      f"these names; its Linear modules are named {', '.join(have)} (e.g. --lora_target_modules "
                      f"{','.join(have)})")


def adapter_folder(path: str | os.PathLike, subdir: str | None = None) -> str:
    """Where the adapter of ``path`` is: one of our LoRA-trained model folders (its ``lora_adapter/``, and the
    encoder's subfolder when untied) or a peft adapter folder / hub id as given."""
    folder = Path(path)
    if (folder / LORA_ADAPTER_DIR).is_dir():
        folder = folder / LORA_ADAPTER_DIR
    if subdir and (folder / subdir / ADAPTER_CONFIG).is_file():
        folder = folder / subdir
    return str(folder) if folder.exists() else str(path)


def check_adapter_config(folder: str | os.PathLike) -> None:
    """Refuse, before peft allocates it, a local adapter whose ``adapter_config.json`` asks for a rank ``r``
    outside ``--lora_r``'s bounds (:mod:`multiview_plugin.bounds`), naming the file."""
    path = Path(folder) / ADAPTER_CONFIG
    if not path.is_file():
        return  # a hub id, or no adapter: peft reports it
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable JSON adapter config ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    pattern = data.get("rank_pattern") or {}
    if not isinstance(pattern, dict):
        raise ConfigError(f"{path}: field 'rank_pattern': expected an object of module -> rank, got {pattern!r}")
    try:
        check_value("r", data.get("r"), (1, MAX_LORA_RANK))
        for module, rank in pattern.items():  # peft gives these modules their own rank
            check_value(f"rank_pattern.{module}", rank, (1, MAX_LORA_RANK))
    except OutOfBoundsError as err:
        raise err.located(path) from None


def apply_lora(encoder: nn.Module, model_args: Any, new_token_ids: list[int], subdir: str | None = None) -> Any:
    """Wrap ``encoder`` (a transformers backbone) in a trainable peft ``PeftModel``.

    With ``--lora_name_or_path``: that adapter, trainable (``PeftModel.from_pretrained(..., is_trainable=True)``, as
    Tevatron; its own r, alpha, dropout and target modules apply). Otherwise a new adapter from ``--lora_r``,
    ``--lora_alpha``, ``--lora_dropout`` and ``--lora_target_modules``, with ``new_token_ids`` (the tokens the method
    added to the vocabulary) as trainable tokens of the input embedding.
    """
    peft = require_peft()
    if is_lora(encoder):
        raise ConfigError("this backbone already has a LoRA adapter")
    adapter = getattr(model_args, "lora_name_or_path", None)
    if adapter:
        path = adapter_folder(adapter, subdir)
        check_adapter_config(path)
        try:
            model = peft.PeftModel.from_pretrained(encoder, path, is_trainable=True)
        except (OSError, ValueError) as err:
            raise ConfigError(f"--lora_name_or_path {adapter}: cannot load a peft adapter from {path} ({err})") \
                from err
        check_supported(model)
        indices = getattr(model.peft_config["default"], "trainable_token_indices", None) or []
        covered = {i for ids in indices.values() for i in ids} if isinstance(indices, dict) else set(indices)
        uncovered = sorted(set(new_token_ids) - covered)
        if uncovered:
            raise ConfigError(f"--lora_name_or_path {adapter}: the adapter does not train the embedding rows of "
                              f"the {len(uncovered)} tokens this method adds (ids {uncovered[:8]}...): start from "
                              "an adapter trained for this method, or train a new one with --lora")
    else:
        targets = parse_target_modules(model_args.lora_target_modules)
        check_target_modules(encoder, targets)
        config = peft.LoraConfig(
            task_type=peft.TaskType.FEATURE_EXTRACTION,
            inference_mode=False,
            r=model_args.lora_r,
            lora_alpha=model_args.lora_alpha,
            lora_dropout=model_args.lora_dropout,
            target_modules=targets,
            trainable_token_indices=sorted(new_token_ids) or None,
        )
        model = peft.get_peft_model(encoder, config)
        # get_peft_model records the folder the backbone was read from; keep the name the user gave (Tevatron's
        # base_model_name_or_path), e.g. a hub id rather than a resolved local copy
        model.peft_config["default"].base_model_name_or_path = getattr(model_args, "model_name_or_path", None)
    return model


def lora_settings(peft_model: Any, new_token_ids: list[int], adapter: str | None = None) -> dict[str, Any]:
    """What ``multiview_config.json`` records about the adapter (``options["lora"]``)."""
    config = peft_model.peft_config["default"]
    targets = config.target_modules
    return {"r": config.r, "alpha": config.lora_alpha, "dropout": config.lora_dropout,
            "target_modules": sorted(targets) if isinstance(targets, (set, list, tuple)) else targets,
            "trainable_token_ids": sorted(new_token_ids), "adapter": LORA_ADAPTER_DIR,
            "started_from": adapter}


def check_supported(peft_model: Any) -> None:
    """Refuse adapters :func:`merged_state_dict` cannot merge (LoRA variants such as DoRA, other peft methods,
    ``modules_to_save``)."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.trainable_tokens import TrainableTokensLayer
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper, TrainableTokensWrapper

    peft_type = str(getattr(peft_model.peft_config["default"], "peft_type", ""))
    if not peft_type.endswith("LORA"):
        raise ConfigError(f"a {peft_type} adapter: only LoRA adapters are supported")
    for name, module in peft_model.get_base_model().named_modules():
        if isinstance(module, LoraLayer):
            if module.lora_variant or not hasattr(module.get_base_layer(), "weight"):
                raise ConfigError(f"LoRA layer {name}: only plain LoRA adapters on weight layers are supported "
                                  "(not DoRA or other variants)")
        elif isinstance(module, BaseTunerLayer) and not isinstance(module, TrainableTokensLayer):
            raise ConfigError(f"{name}: a {type(module).__name__} adapter; only LoRA adapters are supported")
        elif isinstance(module, AuxiliaryTrainingWrapper) and not isinstance(module, TrainableTokensWrapper):
            raise ConfigError(f"{name}: adapters with modules_to_save are not supported (trainable tokens are)")


def _clean_key(key: str) -> str | None:
    """A peft-wrapped backbone's state-dict key → the plain backbone's (None: an adapter weight)."""
    parts = key.split(".")
    if any(p in _ADAPTER_PARTS for p in parts):
        return None
    return ".".join(p for p in parts if p not in _WRAPPER_PARTS)


@torch.no_grad()
def merged_state_dict(peft_model: Any) -> dict[str, torch.Tensor]:
    """The plain backbone's state dict with every adapter merged: each LoRA layer's weight is its base weight plus
    ``get_delta_weight`` (and ``lora_B``'s bias where the adapter has one), the trainable-token rows are written
    into the embedding matrix, adapter weights are dropped and peft's ``.base_layer`` names restored.

    Computed on the side: the training weights are not modified (no in-place merge and unmerge).
    """
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import TrainableTokensWrapper

    base = peft_model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        clean = _clean_key(key)
        if clean is not None:
            merged[clean] = value
    for name, module in base.named_modules():
        prefix = _clean_key(name) if name else ""
        prefix = f"{prefix}." if prefix else ""
        if isinstance(module, LoraLayer):
            layer = module.get_base_layer()
            weight, bias = layer.weight, getattr(layer, "bias", None)
            if not module.merged:
                for adapter in module.active_adapters:
                    if adapter not in module.lora_A and adapter not in module.lora_embedding_A:
                        continue
                    weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
                    if module.lora_bias.get(adapter) and bias is not None:
                        bias = bias + (module.lora_B[adapter].bias * module.scaling[adapter]).to(bias.dtype)
            merged[prefix + "weight"] = weight.detach()
            if bias is not None and prefix + "bias" in merged:
                merged[prefix + "bias"] = bias.detach()
        elif isinstance(module, TrainableTokensWrapper):
            adapter = module.token_adapter
            weight = adapter.get_merged_weights(adapter.active_adapters) if not adapter.merged \
                else adapter.base_layer.weight
            merged[prefix + "weight"] = weight.detach()
    return {k: v.contiguous() for k, v in merged.items()}


def save_merged_backbone(peft_model: Any, folder: str | os.PathLike) -> None:
    """Write the merged backbone as an ordinary transformers model folder (config and weights)."""
    base = peft_model.get_base_model()
    base.save_pretrained(folder, state_dict=merged_state_dict(peft_model))


def save_adapter(peft_model: Any, folder: str | os.PathLike) -> None:
    """Write the peft adapter (``adapter_config.json``, ``adapter_model.safetensors``) to ``folder``. The added
    tokens' rows are in it as trainable tokens; the full embedding matrix is not (``save_embedding_layers=False``):
    load it onto the backbone with its vocabulary resized as the method does (:func:`load_adapter_model`)."""
    peft_model.save_pretrained(str(folder), save_embedding_layers=False)


def adapter_folders(folder: str | os.PathLike, untied: bool) -> dict[str, Path]:
    """``{encoder attribute: adapter folder}`` of a LoRA model folder (``untied``: one adapter per encoder)."""
    root = Path(folder) / LORA_ADAPTER_DIR
    if not untied:
        return {"query_encoder": root}
    return {"query_encoder": root / QUERY_SUBDIR, "passage_encoder": root / PASSAGE_SUBDIR}


def load_adapter_weights(model: MultiViewEncoder, folder: str | os.PathLike) -> None:
    """Load the adapters saved in ``folder`` (``lora_adapter/``) into ``model``'s LoRA-wrapped encoders, in place
    (resuming: the frozen base weights are not read; the adapter and trainable tokens are)."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    for attribute, path in adapter_folders(folder, untied=model.passage_encoder is not None).items():
        encoder = getattr(model, attribute)
        if not (path / ADAPTER_WEIGHTS).is_file():
            raise ConfigError(f"{folder}: {path.relative_to(folder)} holds no LoRA adapter ({ADAPTER_WEIGHTS}); "
                              "was this checkpoint written by a --lora run?")
        state = load_peft_weights(str(path), device=str(next(encoder.parameters()).device))
        try:
            result = set_peft_model_state_dict(encoder, state)
        except (KeyError, RuntimeError, ValueError) as err:
            raise ConfigError(f"{path}: the adapter does not fit this model ({err!r})") from err
        unexpected = list(getattr(result, "unexpected_keys", None) or [])
        trainable = {k for k, p in encoder.named_parameters() if p.requires_grad}
        missing = sorted(trainable & set(getattr(result, "missing_keys", None) or []))
        if unexpected or missing:
            raise ConfigError(f"{path}: the adapter does not fit this model (unexpected {unexpected[:5]}, missing "
                              f"{missing[:5]})")


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts (the total counts the trainable-token rows beside the frozen embedding
    matrix they replace)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total


def new_token_ids_of_saved(model: MultiViewEncoder, saved: dict[str, Any] | None = None) -> list[int]:
    """The tokens a saved model's method added: those its LoRA run recorded (``saved``: its ``options["lora"]``),
    else every token beyond the tokenizer's base vocabulary (``vocab_size`` counts the base vocabulary, ``len``
    the added tokens too)."""
    if saved and saved.get("trainable_token_ids") is not None:
        return list(saved["trainable_token_ids"])
    return list(range(model.tokenizer.vocab_size, len(model.tokenizer)))


def wrap_model(model: MultiViewEncoder, model_args: Any, new_token_ids: list[int]) -> MultiViewEncoder:
    """Give ``model``'s backbone(s) LoRA adapters (:func:`apply_lora`), record the settings in its config and log
    the trainable share of the parameters. Untied encoders get one adapter each."""
    untied = model.passage_encoder is not None
    model.query_encoder = apply_lora(model.query_encoder, model_args, new_token_ids, QUERY_SUBDIR if untied else None)
    if untied:
        model.passage_encoder = apply_lora(model.passage_encoder, model_args, new_token_ids, PASSAGE_SUBDIR)
    adapter = getattr(model_args, "lora_name_or_path", None)
    model.config.options[OPTION] = lora_settings(model.query_encoder, new_token_ids, adapter)
    if adapter:
        _load_extra_of_adapter_folder(model, adapter)
    trainable, total = count_parameters(model)
    settings = model.config.options[OPTION]
    logger.info("LoRA (r %d, alpha %s, dropout %s, target modules %s%s): %d of %d parameters trainable (%.2f%%)",
                settings["r"], settings["alpha"], settings["dropout"], ",".join(settings["target_modules"]),
                f", {len(new_token_ids)} added tokens' embeddings" if new_token_ids else "",
                trainable, total, 100.0 * trainable / max(total, 1))
    return model


def _load_extra_of_adapter_folder(model: MultiViewEncoder, adapter: str) -> None:
    """Starting from one of our LoRA-trained folders of the same method: its parameters outside the backbone
    (e.g. MVR's residual view gates) come with its adapter. A plain peft adapter has none."""
    if not is_multiview_model(adapter) or not (Path(adapter) / EXTRA_WEIGHTS_NAME).is_file():
        return
    if EncoderConfig.load(adapter).model_name != model.config.model_name:
        return
    loaded = model.load_extra_weights(adapter, exact=True)
    logger.info("started from %s: its adapter and its %s", adapter, ", ".join(loaded))


def merge_lora(model: MultiViewEncoder, adapter: str) -> None:
    """Merge a peft LoRA adapter into the model's (tied) encoder, as Tevatron's ``DenseModel.load`` does.
    ``adapter``: a peft adapter folder or hub id, or one of our LoRA-trained folders (its ``lora_adapter/``)."""
    peft = require_peft()
    if OPTION in model.config.options:
        raise ConfigError("--lora_name_or_path: this model was trained with --lora and its folder already holds "
                          "the merged weights: encode it without --lora_name_or_path")
    if model.passage_encoder is not None:
        raise ConfigError("--lora_name_or_path: the model has untied encoders; merge an adapter into each first")
    check_adapter_config(adapter_folder(adapter))
    adapted = peft.PeftModel.from_pretrained(model.query_encoder, adapter_folder(adapter))
    model.query_encoder = adapted.merge_and_unload()
    logger.info("merged the LoRA adapter %s", adapter)
