"""Train any registered encoder, Tevatron style.

    python -m multiview_plugin.driver.train --model_name mvr --model_name_or_path bert-base-uncased \
        --dataset_path train.jsonl --output_dir runs/mvr --train_group_size 2 \
        --per_device_train_batch_size 16 --learning_rate 2e-5 --num_train_epochs 40

Every ``transformers.TrainingArguments`` flag works too; under ``torchrun`` in-batch negatives are shared across
processes (as Tevatron; ``--no_negatives_x_device`` turns that off). ``--help`` lists the project's flags and the
common Trainer ones; ``--help_all`` lists every flag.

Flags that would be ignored are refused or logged (the parity table in docs/tevatron.md says which): the
encode-only flags of Tevatron's shared DataArguments are refused with a non-default value; with a saved multiview
model, ``--config_name``, ``--tokenizer_name`` and model flags that differ from its config are refused (it keeps
its own); ``--fp16`` on CPU and ``--num_proc`` where nothing runs in processes log a WARNING that they are
ignored.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multiview_plugin.cli import build_parser as build_dataclass_parser
from multiview_plugin.cli import cli, parse_dataclasses, setup_logging
from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import OutputLock, refuse_output_over_input
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.tevatron_parity import ENCODE_ONLY

if TYPE_CHECKING:
    from multiview_plugin.arguments import DataArguments, DevArguments, ModelArguments, MultiViewTrainingArguments
    from multiview_plugin.modeling.base import MultiViewEncoder
    from multiview_plugin.modeling.config import EncoderConfig

# torch, transformers, the datasets, the models and the Trainer are imported where they are used, so that
# ``--help`` loads no more than the methods' option classes (no TrainingArguments: ``--help_all`` lists those).
PROG = "python -m multiview_plugin.driver.train"
USAGE = "%(prog)s --model_name_or_path PATH --output_dir DIR [--model_name NAME] [flag ...] | CONFIG.json"


def argument_classes() -> tuple[type, ...]:
    """The dataclasses the train driver parses, in their --help order."""
    from multiview_plugin.arguments import DataArguments, DevArguments, ModelArguments, MultiViewTrainingArguments

    return ModelArguments, DataArguments, DevArguments, MultiViewTrainingArguments


def build_parser() -> Any:
    """The train driver's parser (what ``--help_all`` prints)."""
    return build_dataclass_parser(argument_classes(), prog=PROG, description=__doc__, usage=USAGE)


def build_help_parser() -> Any:
    """What ``--help`` prints: the project's own flags and the common Trainer flags (no TrainingArguments)."""
    from multiview_plugin.arguments import (
        CommonTrainerFlags,
        DataArguments,
        DevArguments,
        ModelArguments,
        MultiViewTrainerFlags,
    )

    parser = build_dataclass_parser((ModelArguments, DataArguments, DevArguments, MultiViewTrainerFlags,
                                     CommonTrainerFlags), prog=PROG, description=__doc__, usage=USAGE)
    parser.epilog = ("Every transformers.TrainingArguments flag works too: --help_all lists them all "
                     "(it loads transformers' training stack).")
    return parser


def print_help(argv: Sequence[str]) -> None:
    """``--help_all``: every flag; ``-h`` / ``--help``: the short list. Exits 0 after printing either."""
    if "--help_all" in argv:
        build_parser().print_help()
        raise SystemExit(0)
    if "-h" in argv or "--help" in argv:
        build_help_parser().print_help()
        raise SystemExit(0)


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


def dev_callback(dev_args: DevArguments, data_args: DataArguments,
                 training_args: MultiViewTrainingArguments, model: MultiViewEncoder) -> Any:
    """Model selection on the dev split (see :mod:`multiview_plugin.evaluation.dev_eval`)."""
    from multiview_plugin.evaluation.dev_eval import DevSelectionCallback, DevSet

    missing = [f"--{n}" for n in ("dev_queries", "dev_qrels", "dev_corpus") if not getattr(dev_args, n)]
    if missing:
        raise ConfigError(f"dev evaluation needs --dev_queries, --dev_qrels and --dev_corpus; missing {missing}")
    needs_views = model.describe_views().get("kind") == "pseudo_query"
    if needs_views and not dev_args.dev_pseudo_queries:
        raise ConfigError(f"{model.config.model_name} encodes documents with their pseudo-queries: dev evaluation "
                          "needs --dev_pseudo_queries (the dev corpus's, as encode's --pseudo_queries)")
    if dev_args.dev_pseudo_queries and not needs_views:
        raise ConfigError(f"--dev_pseudo_queries: {model.config.model_name} does not encode documents with "
                          "pseudo-queries (dce does); drop the flag")
    dev = DevSet(dev_args.dev_corpus, dev_args.dev_queries, dev_args.dev_qrels, dev_args.dev_metric,
                 data_args.passage_field_separator, dev_args.dev_pseudo_queries)
    return DevSelectionCallback(dev, training_args.output_dir, dev_args.dev_eval_steps, dev_args.dev_patience)


def checkpoint_to_resume(training_args: MultiViewTrainingArguments, settings: dict[str, Any] | None = None
                         ) -> str | None:
    """An explicit --resume_from_checkpoint folder (refused if incomplete), else the newest complete checkpoint
    in --output_dir (an interrupted run continues; half-saved checkpoints are skipped with a warning).

    ``settings`` (:func:`~multiview_plugin.training.run_settings.run_settings` of this run): the checkpoint is
    resumed only when its run had the same options (else one line names the first that differs); and an
    ``--output_dir`` holding a previous run's model but no checkpoint to resume is refused. Without
    ``--overwrite_output_dir`` nothing of a previous run is trained over.
    """
    from multiview_plugin.training.checkpoints import checkpoint_problems, last_complete_checkpoint
    from multiview_plugin.training.run_settings import check_resume, previous_run_files

    expect = dict(optimizer_expected=not training_args.save_only_model)
    requested = training_args.resume_from_checkpoint
    if requested is not None and str(requested).lower() != "true":
        problems = checkpoint_problems(requested, **expect) if Path(requested).is_dir() else ["no such folder"]
        if problems:
            raise ConfigError(f"--resume_from_checkpoint {requested}: incomplete checkpoint ({'; '.join(problems)})")
        if settings is not None:
            check_resume(requested, settings)
        return requested
    output_dir = Path(training_args.output_dir)
    resume = None
    if not training_args.overwrite_output_dir and output_dir.is_dir():
        resume = last_complete_checkpoint(output_dir, **expect)
        if resume and settings is not None:
            check_resume(resume, settings)
        elif not resume and settings is not None and (found := previous_run_files(output_dir)):
            raise ConfigError(f"--output_dir {output_dir} holds a previous run ({', '.join(found)}) and no complete "
                              "checkpoint to resume: pass --overwrite_output_dir to train afresh over it, or use "
                              "another --output_dir")
    if resume:
        logger.info("resuming from %s", resume)
    elif requested is not None:
        raise ConfigError(f"--resume_from_checkpoint true: no complete checkpoint in {output_dir}")
    return resume


def refuse_checkpoints_in_the_way(training_args: MultiViewTrainingArguments, settings: dict[str, Any],
                                  resume: str | None) -> None:
    """Refuse, before training, a ``checkpoint-N`` folder in ``--output_dir`` that this run would save into (N
    after the resumed step, up to ``--max_steps``) and that is not its own: a user's folder, or another run's
    (with ``--overwrite_output_dir``, any folder the train driver wrote is this run's to replace). The Trainer
    would write into it, count it as the run's, and ``--save_total_limit`` would delete it."""
    from multiview_plugin.training.checkpoints import checkpoint_step, checkpoints_in_the_way
    from multiview_plugin.training.run_settings import first_difference, load_run_settings, written_by_train

    def is_this_runs(folder: Path) -> bool:
        if not written_by_train(folder):
            return False
        return training_args.overwrite_output_dir or first_difference(load_run_settings(folder), settings) is None

    after = (checkpoint_step(resume) or 0) if resume else 0
    until = training_args.max_steps if training_args.max_steps > 0 else None
    found = checkpoints_in_the_way(training_args.output_dir, after, until, is_this_runs)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(f"--output_dir {training_args.output_dir} holds {found[0].name}{more}, not written by this "
                          "run: training would save a checkpoint into it (and --save_total_limit could delete it); "
                          "move it away, or choose another --output_dir")


@contextlib.contextmanager
def one_trainer(training_args: MultiViewTrainingArguments) -> Iterator[None]:
    """``<output_dir>.lock`` held by the run's main process while it trains: a second train of the same
    ``--output_dir`` started meanwhile is refused in one line (two runs would save checkpoints into one folder and
    each rotate the other's); the other processes of a distributed run write nothing there and take no lock."""
    if training_args.process_index != 0:
        yield
        return
    with OutputLock(Path(training_args.output_dir).resolve()):
        yield


def run_is_finished(training_args: MultiViewTrainingArguments, settings: dict[str, Any]) -> bool:
    """Whether ``--output_dir`` holds the final model of a run with these very settings and the same length
    (its ``multiview_run.json`` is written after the final save). The Trainer, resumed from a run's last
    checkpoint, would train one step past its end instead of none."""
    from multiview_plugin.training.run_settings import first_difference, load_run_settings

    if training_args.overwrite_output_dir or training_args.resume_from_checkpoint:
        return False
    recorded = load_run_settings(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
    return recorded is not None and first_difference(recorded, settings) is None and all(
        recorded.get(k) == settings.get(k) for k in ("max_steps", "num_train_epochs"))


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


@cli
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print_help(argv)
    import torch
    from transformers import set_seed

    from multiview_plugin.arguments import given_flags
    from multiview_plugin.training.run_settings import (
        INPUTS_KEY,
        RunSettingsCallback,
        input_fingerprints,
        run_settings,
        save_run_settings,
    )
    from multiview_plugin.training.trainer import EpochCallback, MultiViewTrainer

    model_args, data_args, dev_args, training_args = parse_dataclasses(
        argument_classes(), argv, driver="train", prog=PROG, description=__doc__, usage=USAGE)
    setup_logging(logging.INFO if training_args.local_rank in (-1, 0) else logging.WARNING)
    set_seed(training_args.seed)
    if training_args.logging_dir:
        os.environ["TENSORBOARD_LOGGING_DIR"] = training_args.logging_dir
    if not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False  # nothing to pin to; avoids a warning per epoch
    refuse_encode_only_flags(data_args)
    warn_fp16_without_gpu(training_args)

    refuse_output_over_input({"--output_dir": training_args.output_dir},
                             {"--dataset_path": (data_args.dataset_path or "").split(","),
                              "--corpus_path": data_args.corpus_path, "--pseudo_queries_path":
                              data_args.pseudo_queries_path, "--dev_queries": dev_args.dev_queries,
                              "--dev_qrels": dev_args.dev_qrels, "--dev_corpus": dev_args.dev_corpus,
                              "--dev_pseudo_queries": dev_args.dev_pseudo_queries,
                              "--model_name_or_path": model_args.model_name_or_path})
    settings = run_settings(model_args, data_args, dev_args, training_args)
    settings[INPUTS_KEY] = input_fingerprints({  # resumed only on the same data (check_resume names the file)
        "--dataset_path": data_args.dataset_path, "--corpus_path": data_args.corpus_path,
        "--pseudo_queries_path": data_args.pseudo_queries_path, "--dev_queries": dev_args.dev_queries,
        "--dev_qrels": dev_args.dev_qrels, "--dev_corpus": dev_args.dev_corpus,
        "--dev_pseudo_queries": dev_args.dev_pseudo_queries})
    with one_trainer(training_args):  # one run per --output_dir at a time (its main process holds the lock)
        resume = checkpoint_to_resume(training_args, settings)  # before the model: a mismatch is one line
        if run_is_finished(training_args, settings):
            logger.info("%s already holds this run, finished (same settings): nothing to train "
                        "(--overwrite_output_dir retrains it; a larger --max_steps or --num_train_epochs continues "
                        "it)", training_args.output_dir)
            return 0
        refuse_checkpoints_in_the_way(training_args, settings, resume)
        model = build_model(model_args, data_args, given_flags(argv))
        dataset, collator = load_training_data(data_args, training_args, model)
        logger.info("training %s (%s loss, temperature schedule %s) on %d queries",
                    model.config.model_name, model.config.loss_name or model.default_loss,
                    model.config.temperature_schedule, len(dataset))

        callbacks: list[Any] = [EpochCallback(dataset), RunSettingsCallback(settings)]
        if dev_args.dev_queries or dev_args.dev_qrels or dev_args.dev_corpus or dev_args.dev_pseudo_queries:
            callbacks.append(dev_callback(dev_args, data_args, training_args, model))
        trainer = MultiViewTrainer(
            model=model,
            args=training_args,
            train_dataset=dataset,
            data_collator=collator,
            callbacks=callbacks,
            run_settings=settings,
        )
        trainer.train(resume_from_checkpoint=resume)
        trainer.save_model()
        trainer.save_state()  # trainer_state.json: the loss / temperature history
        if trainer.is_world_process_zero():
            save_run_settings(training_args.output_dir, settings)
            logger.info("saved %s model to %s", model.config.model_name, training_args.output_dir)
        return 0


if __name__ == "__main__":
    sys.exit(main())
