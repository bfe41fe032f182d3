"""What the encode command does with its parsed flags (``driver.encode``): the input and flag checks, the model
loaded with the text options given as overrides, the shards of this process (one, or under torchrun the rank's)
encoded, or every shard on a Ray cluster.

``args`` is the encode driver's ``EncodeArguments`` (a floor above); torch and the models are imported where they
are used."""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from multiview_plugin.errors import ConfigError
from multiview_plugin.text_options import OPTION_NAMES

if TYPE_CHECKING:
    from multiview_plugin.modeling.base import MultiViewEncoder

logger = logging.getLogger("multiview_plugin.encode")


def check_encode_input(args: Any) -> None:
    """The output path given; the input (a --dataset_name exported once to a local file, or --dataset_path); the
    flags that exclude each other."""
    if not args.encode_output_path:
        raise ConfigError("--encode_output_path is required")
    if args.dataset_name != "json":
        from multiview_plugin.data.hub import export_dataset

        args.dataset_path = str(export_dataset(args.dataset_name, args.dataset_config, args.dataset_path,
                                               args.dataset_split, args.dataset_cache_dir,
                                               f"{args.encode_output_path}.input.jsonl"))
    elif not args.dataset_path:
        raise ConfigError("--dataset_path is required with --dataset_name json")
    elif args.dataset_split != "train":
        raise ConfigError(f"--dataset_split {args.dataset_split}: local json files have only the 'train' split")
    if args.fp16 and args.bf16:
        raise ConfigError("--fp16 and --bf16 exclude each other")


def refuse_ray_flags(args: Any) -> None:
    """--ray_* flags given (None: not given) without --ray_address: one line."""
    ray_flags = [f"--{f.name}" for f in fields(args) if f.name.startswith("ray_") and getattr(args, f.name) is not None]
    if ray_flags:
        raise ConfigError(f"{', '.join(ray_flags)} configure{'s' if len(ray_flags) == 1 else ''} the Ray encode: add "
                          "--ray_address")


def encode_here(args: Any) -> None:
    """This process's shards: --dataset_shard_index, or under torchrun shards r, r+W, ... (one device each)."""
    import torch

    from multiview_plugin.encoding.encode import encode_to_shard
    from multiview_plugin.encoding.parallel import launch_rank, rank_shards, shard_output_path

    model = load_model(args)
    launch = launch_rank()
    if launch.parallel:
        if args.dataset_shard_index:
            raise ConfigError("under torchrun each process picks its shards: drop --dataset_shard_index")
        if args.device is None and torch.cuda.is_available():
            args.device = f"cuda:{launch.local_rank % torch.cuda.device_count()}"
        jobs = [(i, shard_output_path(args.encode_output_path, i))
                for i in rank_shards(args.dataset_number_of_shards, launch)]
        logger.info("process %d of %d encodes shards %s", launch.rank, launch.world_size, [i for i, _ in jobs])
    else:
        jobs = [(args.dataset_shard_index, args.encode_output_path)]
    model = ready_model(args, args.device, model)
    for shard_index, output in jobs:
        encode_to_shard(model, output=output, shard_index=shard_index, **shard_options(args))


# Flags that override the saved model's config (and configure a plain checkpoint loaded as dpr): the shared options.
CONFIG_OVERRIDES = OPTION_NAMES


def given_overrides(args: Any) -> dict[str, Any]:
    """The shared options given on the command line (None: not given)."""
    return {name: getattr(args, name) for name in CONFIG_OVERRIDES if getattr(args, name) is not None}


def load_model(args: Any) -> MultiViewEncoder:
    """The model to encode with: a saved multiview model (every shared option given overrides its config, logged)
    or a plain checkpoint as dpr (the options given, the shared defaults for the others)."""
    from multiview_plugin.modeling.base import backbone_options
    from multiview_plugin.modeling.config import is_multiview_model
    from multiview_plugin.modeling.lora import merge_lora
    from multiview_plugin.modeling.persistence import load_encoder, override_text_options

    overrides = given_overrides(args)
    model = load_encoder(args.model_name_or_path, checkpoint_options=overrides, **backbone_options(args))
    if is_multiview_model(args.model_name_or_path):
        override_text_options(model, overrides)
    if args.lora_name_or_path:
        merge_lora(model, args.lora_name_or_path)
    return model


def ready_model(args: Any, device: str | None, model: MultiViewEncoder | None = None) -> MultiViewEncoder:
    """The model (loaded from ``args`` unless given) on ``device`` (default: cuda if any), in eval mode and the
    --bf16 dtype: what every encode process, local or a Ray worker, encodes with."""
    import torch

    model = load_model(args) if model is None else model
    model.to(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))).eval()
    if args.bf16:
        model.to(torch.bfloat16)
    return model


def shard_options(args: Any) -> dict:
    """The keyword arguments of ``encode_to_shard`` that are the same for every shard of a run."""
    return {"path": args.dataset_path, "is_query": args.encode_is_query, "num_shards": args.dataset_number_of_shards,
            "batch_size": args.per_device_eval_batch_size, "fp16": args.fp16,
            "separator": args.passage_field_separator, "overwrite": args.overwrite,
            "checkpoint_every": args.checkpoint_every, "pseudo_queries": args.pseudo_queries,
            "model_path": args.model_name_or_path}


def encode_ray(args: Any) -> int:
    """--ray_address: every shard on a Ray cluster (multiview_plugin.encoding.ray_encode)."""
    from functools import partial

    from multiview_plugin.encoding.parallel import launch_rank
    from multiview_plugin.encoding.ray_encode import RayEncodeOptions, check_ray_jobs, encode_on_ray
    from multiview_plugin.ray_runtime import ray_session

    if launch_rank().parallel:
        raise ConfigError("--ray_address starts its own workers: run it once, not under torchrun")
    given = {"workers": args.ray_workers, "cpus_per_worker": args.ray_cpus_per_worker,
             "gpus_per_worker": args.ray_gpus_per_worker, "max_restarts": args.ray_max_restarts,
             "timeout": args.ray_timeout}
    options = RayEncodeOptions(**{k: v for k, v in given.items() if v is not None})  # None: not given
    jobs = check_ray_jobs(args.dataset_number_of_shards, args.dataset_shard_index, args.encode_output_path)
    with ray_session(args.ray_address):
        done = encode_on_ray(partial(ready_model, args), jobs, shard_options(args), options, args.device)
    logger.info("Ray encode: %d shards complete (%d items)", len(done), sum(i.num_items for i in done.values()))
    return 0
