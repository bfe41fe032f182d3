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

import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from multiview_plugin.cli import build_parser as build_dataclass_parser
from multiview_plugin.cli import cli, parse_dataclasses, setup_logging
from multiview_plugin.errors import ConfigError
from multiview_plugin.paths import refuse_output_over_input
from multiview_plugin.training.resume import (
    checkpoint_to_resume,
    one_trainer,
    refuse_checkpoints_in_the_way,
    run_is_finished,
)
from multiview_plugin.training.start import (
    build_model,
    load_training_data,
    refuse_encode_only_flags,
    warn_fp16_without_gpu,
)

if TYPE_CHECKING:
    from multiview_plugin.arguments import DataArguments, DevArguments, MultiViewTrainingArguments
    from multiview_plugin.modeling.base import MultiViewEncoder

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
