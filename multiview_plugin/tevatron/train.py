"""Train any passage-group method of multiview_plugin through Tevatron v2's own dataset and trainer.

    python -m multiview_plugin.tevatron.train --model_name mvr --model_name_or_path bert-base-uncased \
        --dataset_path train.jsonl --output_dir runs/mvr --attn_implementation sdpa \
        --train_group_size 2 --per_device_train_batch_size 16 --learning_rate 2e-5 --num_train_epochs 40

Every flag of Tevatron's ``tevatron.retriever.driver.train`` keeps its meaning (``--lora`` too: LoRA adapters
through peft, as our driver trains them), plus our method options (``--model_name``, ``--loss_name``,
``--temperature_schedule``, ``--mvr_*``, ...). The output folder is a multiview_plugin model: encode it with
``multiview_plugin.driver.encode`` (a LoRA run's folder holds the merged weights, and the adapter in
``lora_adapter/``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import typing
from collections.abc import Sequence
from typing import Any

from transformers import set_seed
from transformers.trainer_utils import get_last_checkpoint

from multiview_plugin.arguments import ModelArguments, refuse_foreign_options
from multiview_plugin.cli import HelpFormatter, cli, driver_argument_parser, setup_logging
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.base import MultiViewEncoder
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.text_options import DEFAULTS
from multiview_plugin.training.trainer import EpochCallback, MultiViewTrainer

TEVATRON_MISSING = ("multiview_plugin.tevatron needs Tevatron v2, installed from source (it is not on PyPI): "
                    "pip install 'multiview_plugin[tevatron]' && pip install --no-deps <tevatron source folder or "
                    "tarball>; or train with python -m multiview_plugin.driver.train, which takes the same flags")
try:
    from tevatron.retriever.arguments import DataArguments as TevatronDataArguments
    from tevatron.retriever.arguments import ModelArguments as TevatronModelArguments
    from tevatron.retriever.arguments import TevatronTrainingArguments
    from tevatron.retriever.dataset import TrainDataset
    from tevatron.retriever.trainer import TevatronTrainer
except ImportError:  # --help still works (our flags, and this message); a run is refused in one line
    HAVE_TEVATRON = False
    TevatronTrainer = object
else:
    HAVE_TEVATRON = True

logger = logging.getLogger("multiview_plugin.tevatron.train")


def _extend_model_arguments() -> type:  # (called only where Tevatron is installed)
    """Tevatron's ModelArguments plus our method fields (those it lacks: --model_name, --mvr_*, ...)."""
    ours = typing.get_type_hints(ModelArguments)
    tevatron = {f.name for f in dataclasses.fields(TevatronModelArguments)}
    extra = [(f.name, ours[f.name], f) for f in dataclasses.fields(ModelArguments) if f.name not in tevatron]
    return dataclasses.make_dataclass("PluginModelArguments", extra, bases=(TevatronModelArguments,))


PluginModelArguments = _extend_model_arguments() if HAVE_TEVATRON else None


class TevatronTupleCollator:
    """Tevatron's items ``((query, image, video, audio), [(passage, ...), ...])`` → our method's collator.

    Tevatron's dataset has already prepended ``--query_prefix``/``--passage_prefix``; our formatter prepends
    them too (they are saved with the model for encoding), so they are taken off here first.
    """

    def __init__(self, model: MultiViewEncoder, query_prefix: str = DEFAULTS.query_prefix,
                 passage_prefix: str = DEFAULTS.passage_prefix):
        self.collator = model.train_collator()
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix

    @staticmethod
    def _strip(text: str, prefix: str) -> str:
        return text[len(prefix):] if prefix and text.startswith(prefix) else text

    def __call__(self, features: list[tuple[Any, list[Any]]]) -> dict[str, Any]:
        items = [{"query": self._strip(q[0], self.query_prefix),
                  "passages": [self._strip(p[0], self.passage_prefix) for p in passages]}
                 for q, passages in features]
        return self.collator(items)


class PluginTrainer(MultiViewTrainer, TevatronTrainer):
    """Tevatron's trainer (its DDP loss scaling) with our loss logging, temperature schedule, GradCache for
    every method, and saving/resuming in our model format."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # Tevatron gathers in-batch negatives across processes whenever it runs distributed
        self.model.negatives_x_device = True


def build_plugin_model(model_args: Any, data_args: Any, training_args: Any) -> MultiViewEncoder:
    cls = get_encoder_class(model_args.model_name)
    if cls.train_data is not MultiViewEncoder.train_data:
        raise ConfigError(f"{model_args.model_name} trains on its own units (not Tevatron's passage groups): "
                          "use python -m multiview_plugin.driver.train")
    if training_args.bf16 or training_args.fp16:  # Tevatron loads the weights in the mixed-precision dtype
        model_args.dtype = "bfloat16" if training_args.bf16 else "float16"
    return cls.build(model_args, data_args)


def help_without_tevatron(argv: Sequence[str]) -> None:
    """Without Tevatron: ``--help`` prints what is missing and our own flags (Tevatron's come with it); any other
    run is refused in one line."""
    if "-h" in argv or "--help" in argv:
        print(f"note: {TEVATRON_MISSING}\n", file=sys.stderr)
        driver_argument_parser()((ModelArguments,), prog=PROG, description=__doc__ + (
            "\nTevatron v2 is not installed: the flags below are the ones multiview_plugin adds; Tevatron's own "
            "(data, training) are listed once it is installed."),
            formatter_class=HelpFormatter).print_help()
        raise SystemExit(0)
    raise ConfigError(TEVATRON_MISSING)


PROG = "python -m multiview_plugin.tevatron.train"


@cli
def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not HAVE_TEVATRON:
        help_without_tevatron(argv)
    parser = driver_argument_parser()((PluginModelArguments, TevatronDataArguments, TevatronTrainingArguments),
                                                  prog=PROG, description=__doc__, formatter_class=HelpFormatter)
    if len(argv) == 1 and argv[0].endswith(".json"):
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(argv[0]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    refuse_foreign_options(argv, model_args.model_name)
    output_dir = training_args.output_dir
    if (os.path.exists(output_dir) and os.listdir(output_dir) and training_args.do_train
            and not getattr(training_args, "overwrite_output_dir", False)):
        raise ConfigError(f"output directory {output_dir} exists and is not empty; use --overwrite_output_dir")
    setup_logging(logging.INFO if training_args.local_rank in (-1, 0) else logging.WARNING)
    set_seed(training_args.seed)

    model = build_plugin_model(model_args, data_args, training_args)
    train_dataset = TrainDataset(data_args)
    collator = TevatronTupleCollator(model, data_args.query_prefix, data_args.passage_prefix)
    logger.info("training %s through Tevatron's TrainDataset and TevatronTrainer on %d queries",
                model.config.model_name, len(train_dataset))
    trainer = PluginTrainer(model=model, args=training_args, train_dataset=train_dataset, data_collator=collator,
                            callbacks=[EpochCallback()])
    train_dataset.set_trainer(trainer)
    last_checkpoint = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    trainer.train(resume_from_checkpoint=last_checkpoint)
    trainer.save_model()
    trainer.save_state()
    if trainer.is_world_process_zero():
        logger.info("saved %s model to %s", model.config.model_name, output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
