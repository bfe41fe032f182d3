"""What a train run starts from: the model (a new one from a backbone, or a saved multiview model to keep
training, refusing the model flags it would ignore), the training data and collator, and the flags training would
ignore (encode-only flags refused, ``--fp16`` on CPU warned about). The train driver parses the flags and calls
these.

The argument objects are the train driver's dataclasses (``multiview_plugin.arguments``, a floor above: typed
here by duck typing, ``Any``)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multiview_plugin.errors import ConfigError
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.tevatron_parity import ENCODE_ONLY

if TYPE_CHECKING:
    from multiview_plugin.modeling.base import MultiViewEncoder
    from multiview_plugin.modeling.config import EncoderConfig

# the argument dataclasses (ModelArguments, DataArguments, MultiViewTrainingArguments) live in arguments.py, above
ModelArguments = DataArguments = MultiViewTrainingArguments = Any

logger = logging.getLogger("multiview_plugin.train")


def build_model(model_args: ModelArguments, data_args: DataArguments,
                given: Collection[str] = ()) -> MultiViewEncoder:
    """A new model from a backbone, or a saved multiview model to keep training; ``given``: the flags given on the
    command line (:func:`~multiview_plugin.arguments.given_flags`)."""
    from multiview_plugin.modeling import lora
    from multiview_plugin.modeling.base import backbone_options
    from multiview_plugin.modeling.config import is_multiview_model
    from multiview_plugin.modeling.persistence import load_encoder

    cls = get_encoder_class(model_args.model_name)  # unknown names fail here, before anything loads
    if is_multiview_model(model_args.model_name_or_path):
        own = [f"--{name}" for name in ("config_name", "tokenizer_name") if getattr(model_args, name)]
        if own:
            raise ConfigError(f"{' and '.join(own)}: {model_args.model_name_or_path} is a saved multiview model, "
                              "trained on with its own backbone config and tokenizer; drop the flag")
        model = load_encoder(model_args.model_name_or_path, **backbone_options(model_args))
        if model.config.model_name != model_args.model_name:
            raise ConfigError(f"{model_args.model_name_or_path} holds a {model.config.model_name!r} model, "
                              f"not {model_args.model_name!r}")
        refuse_flags_the_saved_model_overrides(cls, model_args, data_args, model.config, given)
        # a saved LoRA model loads merged: training it again is full fine-tuning unless --lora says otherwise
        saved_lora = model.config.options.pop(lora.OPTION, None)
        if lora.wants_lora(model_args):
            if saved_lora and model_args.lora_name_or_path and _same_model(model_args):
                raise ConfigError(f"--lora_name_or_path {model_args.lora_name_or_path}: that adapter is already "
                                  f"merged into {model_args.model_name_or_path}; to keep training it, pass the "
                                  f"original backbone ({model.config.backbone}) as --model_name_or_path")
            lora.wrap_model(model, model_args, lora.new_token_ids_of_saved(model, saved_lora))
        return model
    return cls.build(model_args, data_args)


def refuse_flags_the_saved_model_overrides(cls: type[MultiViewEncoder], model_args: ModelArguments,
                                           data_args: DataArguments, saved: EncoderConfig,
                                           given: Collection[str] = ()) -> None:
    """A saved multiview model keeps training with its own config: refuse, in one line, the model flags (pooling,
    temperature, lengths, method options ...) given (named in ``given``, or with a value other than their default)
    with a value that differs from the saved model's, which training would otherwise ignore: ``--normalize False``
    on a model saved with ``normalize`` too."""
    given = {name[3:] if name.startswith("no_") else name for name in given}
    def flat(config: EncoderConfig) -> dict[str, Any]:
        out = config.to_dict()
        return {**{k: v for k, v in out.items() if k not in ("options", "backbone", "format_version")},
                **out["options"]}

    wanted = flat(cls.config_from_args(model_args, data_args))
    default = flat(cls.config_from_args(type(model_args)(model_name_or_path=model_args.model_name_or_path,
                                                         model_name=model_args.model_name), type(data_args)()))
    have = flat(saved)
    differ = [f"--{k} {v} (the model's: {have.get(k)})" for k, v in wanted.items()
              if (k in given or v != default.get(k)) and v != have.get(k)]
    if differ:
        raise ConfigError(f"{', '.join(differ)}: {model_args.model_name_or_path} is a saved multiview model and keeps "
                          f"training with its own config; drop {'it' if len(differ) == 1 else 'them'} (or start from "
                          f"its backbone, {saved.backbone}, to train with other settings)")


def _same_model(model_args: ModelArguments) -> bool:
    """Whether --lora_name_or_path is --model_name_or_path or its own lora_adapter/ folder."""
    model = Path(model_args.model_name_or_path).resolve()
    adapter = Path(model_args.lora_name_or_path).resolve()
    return adapter == model or model in adapter.parents


def load_training_data(data_args: DataArguments, training_args: MultiViewTrainingArguments,
                       model: MultiViewEncoder | None = None) -> tuple[Any, Any]:
    """(dataset, collator) for ``model`` (its :meth:`~MultiViewEncoder.train_data`; passage groups when None)."""
    from multiview_plugin.data.dataset import TrainDataset, load_train_records

    if data_args.pseudo_queries_path:
        from multiview_plugin.data.pseudo_queries import warmup_records

        records = warmup_records(data_args.pseudo_queries_path, data_args.corpus_path,
                                 data_args.passage_field_separator, data_args.dataset_cache_dir)
        if data_args.train_group_size != 1:
            logger.info("warm-up on pseudo-queries: in-batch negatives only (--train_group_size 1)")
            data_args.train_group_size = 1
    elif data_args.dataset_name != "json":
        from multiview_plugin.data.dataset import load_hub_train_records

        records = load_hub_train_records(data_args)
    else:
        if not data_args.dataset_path:
            raise ConfigError("--dataset_path is required with --dataset_name json")
        records = load_train_records(data_args.dataset_path, data_args.corpus_path,
                                     data_args.passage_field_separator, data_args.dataset_cache_dir)
    options = dict(group_size=data_args.train_group_size, seed=training_args.seed,
                   positive_no_shuffle=data_args.positive_passage_no_shuffle,
                   negative_no_shuffle=data_args.negative_passage_no_shuffle)
    local = data_args.pseudo_queries_path or data_args.dataset_name == "json"
    if data_args.num_proc > 1 and local and not (model is not None and model.prepares_data_in_processes()):
        logger.warning("--num_proc %d is ignored: local train files are read in one validated pass, and only dcsr's "
                       "sentence training prepares records in processes (it also applies to hub datasets, "
                       "--dataset_name)", data_args.num_proc)
    if model is None:
        return TrainDataset(records, **options), None
    return model.train_data(records, num_proc=data_args.num_proc, **options)


def refuse_encode_only_flags(data_args: DataArguments) -> None:
    """One line for the encode-only flags (Tevatron's shared DataArguments) given a value other than the default:
    training would ignore them."""
    defaults = type(data_args).__dataclass_fields__
    given = [f"--{name} {getattr(data_args, name)}" for name in ENCODE_ONLY
             if getattr(data_args, name) != defaults[name].default]
    if given:
        raise ConfigError(f"{', '.join(given)}: encoding {'flags' if len(given) > 1 else 'flag'} of "
                          "python -m multiview_plugin.driver.encode; the train driver does not use "
                          f"{'them' if len(given) > 1 else 'it'}: drop {'them' if len(given) > 1 else 'it'}")


def warn_fp16_without_gpu(training_args: MultiViewTrainingArguments) -> None:
    """``--fp16`` on CPU: transformers trains in float32 there without a word (accelerate enables float16 autocast
    and loss scaling on GPUs only); say so."""
    if training_args.fp16 and training_args.device.type == "cpu":
        logger.warning("--fp16 is ignored on CPU: float16 mixed precision needs a GPU, so training runs in float32 "
                       "(transformers does the same without a word); --bf16 gives mixed precision on CPU")
