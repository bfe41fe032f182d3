"""Command-line arguments, as dataclasses parsed by ``transformers.HfArgumentParser``.

Field names and defaults follow Tevatron v2 (``tevatron.retriever.arguments``) so its commands work unchanged;
the multi-view options are namespaced by method (``--mvr_*``). A single ``.json`` file given as the only
argument is read as a config, like Tevatron and the Hugging Face examples.

``ModelArguments`` is assembled from the registry: :class:`BaseModelArguments` (the flags every method shares)
plus the typed options of every registered method (each method's ``options_class``, declared next to its
encoder; see :mod:`multiview_plugin.modeling.options`), so a method added through the
``multiview_plugin.encoders`` entry points brings its own flags. :func:`model_arguments` builds it for the methods
registered now; ``from multiview_plugin.arguments import ModelArguments`` gives that class.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from multiview_plugin.bounds import MAX_LORA_RANK, Bounds, check_fields
from multiview_plugin.cli import ParsedArguments
from multiview_plugin.errors import ConfigError
from multiview_plugin.text_options import (
    MASK_DUPLICATE_POSITIVES,
    OPTION_NAMES,
    PASSAGE_FIELD_SEPARATOR,
    TEMPERATURE,
    TEXT_GROUP_DESCRIPTION,
    UNTIE_ENCODER,
    argument_field,
    bounds_of,
)

# the help of Tevatron's encode-only DataArguments (multiview_plugin.tevatron_parity.ENCODE_ONLY)
_ENCODE_ONLY = " Encoding only: the train driver refuses a value other than the default."
# the built-in methods' flags come in this order in --help (then other methods', by name)
_HELP_ORDER = ("mvr", "mlr", "dcsr", "mebert")
# --help's group of the shared text options (multiview_plugin.text_options), in ModelArguments and DataArguments
TEXT_GROUP = ("text options (every method; saved with the model, the encode driver can override them)",
              TEXT_GROUP_DESCRIPTION)


@dataclass
class BaseModelArguments(ParsedArguments):
    model_name_or_path: str = field(
        metadata={"help": "Backbone to start from (HF folder or hub id), or a saved multiview_plugin model "
                  "folder (one holding multiview_config.json) to continue training it."}
    )
    # ``model_name`` must be a real dataclass field: otherwise argparse's prefix matching would silently
    # read ``--model_name mvr`` as ``--model_name_or_path mvr``.
    model_name: str = field(
        default="dpr",
        metadata={"help": "Which multi-view method to train: a registered encoder name "
                  "(built-in: dpr, mvr, mlr, mebert, dcsr, dce; more through the 'multiview_plugin.encoders' entry "
                  "points)."},
    )
    loss_name: str | None = field(
        default=None,
        metadata={"help": "Registered loss to train with; default: the model's own (dpr: contrastive, "
                  "mvr: mvr_global_local, mlr with self_contrastive pooling: mlr_self_contrastive)."},
    )
    config_name: str | None = field(
        default=None,
        metadata={"help": "Backbone config (folder, config.json or hub id) to build the backbone with, if not "
                  "model_name_or_path's own; the weights still come from model_name_or_path, as in the Hugging Face "
                  "examples. Not with a saved multiview model (its config is its own)."},
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer name or path, if not the same as model_name_or_path. Not with a "
                                "saved multiview model (its tokenizer is its own)."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where hub downloads are cached."})
    model_revision: str | None = field(
        default=None, metadata={"help": "Hub revision (branch, tag or commit) of the backbone and tokenizer."}
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={"choices": ("eager", "sdpa", "flash_attention_2"),
                  "help": "Backbone attention: 'eager', 'sdpa' or 'flash_attention_2' (needs flash-attn and a GPU). "
                  "Default: transformers' choice (sdpa where supported); Tevatron defaults to flash_attention_2."},
    )
    dtype: str | None = field(
        default="float32",
        metadata={"choices": ("float32", "float16", "bfloat16"),
                  "help": "Load (and train) the backbone weights in float32, float16 or bfloat16. For mixed "
                  "precision with float32 weights use --bf16/--fp16 instead."},
    )
    pooling: str = argument_field("pooling")
    normalize: bool = argument_field("normalize")
    temperature: float = field(
        default=TEMPERATURE,
        metadata={"help": "Softmax temperature tau of the contrastive loss. With --temperature_schedule "
                  "annealed this is the starting value tau_0."},
    )
    temperature_schedule: str | None = field(
        default=None,
        metadata={"choices": ("fixed", "annealed"),
                  "help": "'fixed' (tau = --temperature) or 'annealed' (MVR eq. 8 generalised: "
                  "tau = max(tau_min, tau_0 * exp(-alpha * epoch)), updated once per epoch, epochs counted from 0; "
                  "mvr sets tau_min and alpha with --mvr_min_temperature and --mvr_alpha, the other methods use the "
                  "paper's 0.3 and 0.1). Default: the model's own (mvr: annealed, the others: fixed)."},
    )
    mask_duplicate_positives: bool = field(
        default=MASK_DUPLICATE_POSITIVES,
        metadata={"help": "Training: drop from each query's negatives every in-batch candidate identical to its "
                  "positive (the same passage text; for dcsr the same sentence), e.g. another question about the "
                  "same SQuAD paragraph, or another query's hard negative that is this query's positive. Default "
                  "off (the papers' plain in-batch loss)."},
    )
    untie_encoder: bool = field(
        default=UNTIE_ENCODER, metadata={"help": "Use separate query and passage encoders (default: shared weights)."}
    )
    # --- LoRA (Tevatron v2's flags, names and defaults; needs peft: pip install 'multiview_plugin[lora]') ---
    lora: bool = field(
        default=False,
        metadata={"help": "Train LoRA adapters (peft) on the frozen backbone instead of fine-tuning all its weights. "
                  "Tokens the method adds (mvr viewers, dcsr's <sent>) stay trainable as their embedding rows, and "
                  "parameters outside the backbone (mvr residual gates, mlr scalar mix) train as usual. The output "
                  "folder is a complete model with the adapters merged, plus the adapters in lora_adapter/."},
    )
    lora_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Start from this LoRA adapter (a peft adapter folder or hub id, or one of our LoRA-trained "
                  "output folders) and keep training it (implies --lora; its r, alpha, dropout and target modules "
                  "are the adapter's)."},
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank r."})
    lora_alpha: int = field(default=64, metadata={"help": "LoRA alpha: the update is scaled by alpha / r."})
    lora_dropout: float = field(default=0.1, metadata={"help": "Dropout on the LoRA branch's input."})
    lora_target_modules: str = field(
        default="q_proj,k_proj,v_proj,o_proj,down_proj,up_proj,gate_proj",
        metadata={"help": "Comma-separated names of the Linear modules that get adapters (Tevatron's default names "
                  "LLaMA-style layers; BERT-like backbones such as all-MiniLM-L6-v2: query,key,value,dense; T5: "
                  "q,k,v,o). Names no module has are an error that lists the backbone's Linear module names."},
    )

    # (HfArgumentParser hands a field's metadata to argparse, so the bounds of the flags are tables.)
    BOUNDS: ClassVar[dict[str, Bounds]] = {"lora_r": (1, MAX_LORA_RANK), "lora_dropout": (0.0, 1.0)}

    @classmethod
    def argument_group(cls, name: str) -> tuple[str, str | None]:
        """The --help group of flag ``name``: the shared text options, LoRA, a method's options, or the model."""
        if name in OPTION_NAMES:
            return TEXT_GROUP
        if name == "lora" or name.startswith("lora_"):
            return "LoRA (needs peft: pip install 'multiview_plugin[lora]')", None
        owner = option_owners().get(name)
        if owner:
            return f"{owner} options (only with --model_name {owner})", None
        return "model (every method)", None

    def __post_init__(self) -> None:
        """Refuse sizes out of range at parse time (:mod:`multiview_plugin.bounds`): these flags, and the method
        options of every registered method (each checks its own, as when read from a saved config)."""
        check_fields(self, bounds=self.BOUNDS)
        for _, options in _method_options():
            options.from_args(self)

    @classmethod
    def current(cls) -> type:
        """``ModelArguments`` with the flags of every method registered now (``cli.parse_dataclasses`` asks)."""
        return model_arguments() if getattr(cls, "assembled_from_registry", False) else cls

    def check_argv(self, argv: Sequence[str]) -> None:
        """Refuse the options of a method other than ``--model_name`` given in ``argv`` (``cli`` asks)."""
        refuse_foreign_options(argv, self.model_name)


@dataclass
class DataArguments:
    dataset_name: str = field(
        default="json",
        metadata={"help": "'json' for local files in --dataset_path, or a Hugging Face dataset name "
                  "(e.g. Tevatron/msmarco-passage) loaded with datasets.load_dataset."},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hugging Face dataset config."})
    dataset_path: str | None = field(
        default=None,
        metadata={"help": "Local train file(s) in Tevatron jsonl (legacy: query/positive_passages/"
                  "negative_passages, or new: query_text/positive_document_ids with --corpus_path); "
                  "comma-separated for several files, .gz accepted."},
    )
    pseudo_queries_path: str | None = field(
        default=None,
        metadata={"help": "Warm-up mode (DCE): train on generated pseudo-queries instead of --dataset_path, each "
                  "query with its own document (from --corpus_path) as the positive and in-batch negatives only "
                  "(--train_group_size becomes 1). Then fine-tune the result on the real train set."},
    )
    dataset_split: str = field(default="train", metadata={"help": "Split to load from a hub dataset."})
    dataset_cache_dir: str | None = field(default=None, metadata={"help": "Cache folder for datasets."})
    corpus_name: str | None = field(
        default=None, metadata={"help": "Hub corpus dataset, for train files that hold only document ids."}
    )
    corpus_config: str | None = field(default=None, metadata={"help": "Hub corpus dataset config."})
    corpus_path: str | None = field(
        default=None, metadata={"help": "Local corpus jsonl ({docid,title,text}) for id-only train files."}
    )
    corpus_split: str = field(default="train", metadata={"help": "Split of the hub corpus dataset."})
    dataset_number_of_shards: int = field(
        default=1, metadata={"help": "Split the input into this many shards (encoding)." + _ENCODE_ONLY}
    )
    dataset_shard_index: int = field(default=0, metadata={"help": "Which shard to process (encoding)." + _ENCODE_ONLY})
    train_group_size: int = field(
        default=8,
        metadata={"help": "Passages per query in a training group: 1 positive + (train_group_size - 1) "
                  "hard negatives (sampled with replacement when a query has fewer)."},
    )
    positive_passage_no_shuffle: bool = field(
        default=False, metadata={"help": "Always use the first positive instead of one sampled per epoch."}
    )
    negative_passage_no_shuffle: bool = field(
        default=False, metadata={"help": "Always use the first negatives instead of sampling per epoch."}
    )
    encode_is_query: bool = field(default=False, metadata={"help": "Encode queries instead of passages."
                                                           + _ENCODE_ONLY})
    encode_output_path: str | None = field(default=None, metadata={"help": "Where to write an encoded shard."
                                                                   + _ENCODE_ONLY})
    query_max_len: int = argument_field("query_max_len")
    passage_max_len: int = argument_field("passage_max_len")
    query_prefix: str = argument_field("query_prefix")
    passage_prefix: str = argument_field("passage_prefix")
    passage_field_separator: str = field(
        default=PASSAGE_FIELD_SEPARATOR, metadata={"help": "String joining a passage's title and text."}
    )
    pad_to_multiple_of: int | None = argument_field("pad_to_multiple_of")
    num_proc: int = field(
        default=1,
        metadata={"help": "Processes for dataset preparation: loading and validating a hub dataset (--dataset_name, "
                  "as Tevatron) and dcsr's sentence records. Local train files are read in one validated pass, so "
                  "for the other methods a WARNING says it is ignored there."},
    )
    padding_side: str = argument_field("padding_side")
    append_eos_token: bool = argument_field("append_eos_token")
    add_special_tokens: bool = argument_field("add_special_tokens")

    BOUNDS: ClassVar[dict[str, Bounds]] = {
        **bounds_of("query_max_len", "passage_max_len", "pad_to_multiple_of"),
        "train_group_size": (1, None), "num_proc": (1, None), "dataset_number_of_shards": (1, None),
        "dataset_shard_index": (0, None)}

    def __post_init__(self) -> None:
        check_fields(self, bounds=self.BOUNDS)

    @classmethod
    def argument_group(cls, name: str) -> tuple[str, str | None]:
        return TEXT_GROUP if name in OPTION_NAMES else ("data", None)


@dataclass
class DevArguments:
    """Model selection on a dev split during training: every ``--dev_eval_steps`` the model encodes a dev corpus
    and dev queries, ranks exactly (max over views), and scores ``--dev_metric`` against dev qrels; the best
    model is saved to ``<output_dir>/best`` and training stops after ``--dev_patience`` evaluations without
    improvement."""

    dev_queries: str | None = field(
        default=None, metadata={"help": "Dev queries (jsonl/tsv, as for search). Enables dev evaluation."})
    dev_qrels: str | None = field(default=None, metadata={"help": "Dev qrels (TREC or BEIR tsv)."})
    dev_corpus: str | None = field(
        default=None, metadata={"help": "Dev corpus jsonl; keep it small (it is encoded at every evaluation)."})
    dev_pseudo_queries: str | None = field(
        default=None, metadata={"help": "dce: the dev corpus's pseudo-queries (its views; same format as encode's "
                                "--pseudo_queries). Required for dce, refused for the other methods."})
    dev_metric: str = field(default="MRR@10", metadata={"help": "ir_measures metric to select on (MRR@10)."})
    dev_eval_steps: int = field(default=100, metadata={"help": "Evaluate on dev every this many steps."})
    dev_patience: int = field(
        default=0, metadata={"help": "Stop after this many dev evaluations without improvement (0: never stop)."})

    _argument_group_name: ClassVar[str] = "dev evaluation (model selection during training)"


@dataclass
class MultiViewTrainerFlags:
    """The training flags multiview_plugin adds to (or redefines in) ``transformers.TrainingArguments``: a plain
    dataclass, so the train driver's ``--help`` lists them without importing transformers' training stack;
    :class:`MultiViewTrainingArguments` is both."""

    # transformers >= 5.2 dropped ``warmup_ratio`` (``warmup_steps`` < 1 is a ratio there); this field is mapped
    # onto whatever the installed version honours in __post_init__, so the flag is never silently ignored.
    warmup_ratio: float = field(default=0.1, metadata={"help": "Linear warm-up fraction of the training steps "
                                "(Tevatron's default 0.1); --warmup_steps, when given, wins."})
    negatives_x_device: bool = field(
        default=True,
        metadata={"help": "Under torchrun, gather queries and passages from every process so each query "
                  "sees all passages of the global batch as in-batch negatives (on by default, as Tevatron "
                  "always does; --no_negatives_x_device keeps each process's own)."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start from scratch even if --output_dir holds checkpoints (by default an interrupted "
                  "run in the same --output_dir resumes from its last checkpoint)."},
    )
    grad_cache: bool = field(
        default=False,
        metadata={"help": "Gradient cache (Gao et al., 2021): encode the batch in chunks without gradients, take the "
                  "loss's gradients w.r.t. the vectors, then re-encode chunk by chunk and backpropagate them. Same "
                  "loss and gradients as one big batch in the memory of one chunk; every method (multi-vector too)."},
    )
    gc_q_chunk_size: int = field(default=4, metadata={"help": "--grad_cache: queries per chunk."})
    gc_p_chunk_size: int = field(default=32, metadata={"help": "--grad_cache: passages per chunk."})
    logging_dir: str | None = field(
        default=None, metadata={"help": "TensorBoard log folder (sets TENSORBOARD_LOGGING_DIR, which replaced this "
                                "flag in transformers 5.2)."},
    )
    logging_steps: float = field(
        default=0.1,
        metadata={"help": "Log the training loss every this many steps; below 1, a fraction of the run's total steps "
                  "(default 0.1: ten loss lines per run, however short; transformers' own default, 500 steps, "
                  "printed nothing for a run of fewer steps)."},
    )
    # The Trainer would drop our text columns otherwise.
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep dataset columns (leave False)."})

    _argument_group_name: ClassVar[str] = "training (multiview_plugin's Trainer flags)"


@functools.cache
def _training_arguments_class() -> type:
    """``MultiViewTrainingArguments``: :class:`MultiViewTrainerFlags` on ``transformers.TrainingArguments``, made
    on first use (``from multiview_plugin.arguments import MultiViewTrainingArguments``): TrainingArguments loads
    torch and accelerate, which no ``--help`` needs."""
    from transformers import TrainingArguments

    @dataclass
    class MultiViewTrainingArguments(MultiViewTrainerFlags, TrainingArguments):
        @classmethod
        def argument_group(cls, name: str) -> tuple[str, str | None]:
            if name in MultiViewTrainerFlags.__dataclass_fields__:  # declared here, not inherited
                return MultiViewTrainerFlags._argument_group_name, None
            return TRAINER_GROUP

        def __post_init__(self) -> None:
            if not 0 <= self.warmup_ratio < 1:
                raise ValueError(f"--warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
            if self.warmup_ratio and not self.warmup_steps and not _honours_warmup_ratio():
                self.warmup_steps = self.warmup_ratio  # a float below 1 is a ratio of the total steps there
            super().__post_init__()

    MultiViewTrainingArguments.__module__ = __name__
    MultiViewTrainingArguments.__qualname__ = "MultiViewTrainingArguments"  # pickled by name (training_args.bin)
    return MultiViewTrainingArguments


TRAINER_GROUP = ("training (the Hugging Face Trainer's flags, transformers.TrainingArguments)",
                 "See https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments")


@dataclass
class CommonTrainerFlags:
    """The ``transformers.TrainingArguments`` flags most runs set, for the train driver's short ``--help`` only
    (``--help_all`` lists every one; :class:`MultiViewTrainingArguments` parses them). Their defaults are the
    installed TrainingArguments' (a test compares them)."""

    output_dir: str | None = field(default=None, metadata={
        "help": "Where checkpoints and the trained model are written (required)."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Queries per device per step."})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "Steps whose gradients add up before each update (the batch times this is the effective batch)."})
    learning_rate: float = field(default=5e-05, metadata={"help": "The optimizer's initial learning rate."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    max_steps: int = field(default=-1, metadata={"help": "A positive number: train this many steps instead of "
                                                 "--num_train_epochs."})
    save_steps: float = field(default=500, metadata={"help": "Save a checkpoint every this many steps (below 1: a "
                                                     "fraction of the total steps)."})
    save_total_limit: int | None = field(default=None, metadata={"help": "Keep at most this many checkpoints."})
    seed: int = field(default=42, metadata={"help": "Random seed set at the start of training."})
    fp16: bool = field(default=False, metadata={"help": "float16 mixed precision (GPU)."})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision."})

    _argument_group_name: ClassVar[str] = (f"{TRAINER_GROUP[0][:-1]}: the common ones; --help_all lists every "
                                           "one)")


def _method_options() -> list[tuple[str, type]]:
    """``(method name, options class)`` of every registered method, in --help order."""
    from multiview_plugin.modeling.options import MethodOptions
    from multiview_plugin.registry import ENCODERS, get_options_class

    names = ENCODERS.listed_names()  # the built-ins' options come without their encoders (no torch)
    ordered = [n for n in _HELP_ORDER if n in names] + [n for n in names if n not in _HELP_ORDER]
    out = []
    for name in ordered:
        options = get_options_class(name) or MethodOptions
        if options.option_fields():
            out.append((name, options))
    return out


def _registered(table: str) -> tuple[str, ...]:
    from multiview_plugin import registry

    return tuple(getattr(registry, table).listed_names())  # the built-ins' names, without importing them


def _with_choices(name: str, choices: tuple[str, ...]) -> tuple[str, Any, Any]:
    """BaseModelArguments' field ``name`` listing ``choices`` (the registered names) in --help; the registry
    refuses another name with its own message (an entry point may name a method not loaded yet)."""
    f = BaseModelArguments.__dataclass_fields__[name]
    return name, f.type, field(default=f.default, metadata={**f.metadata, "metavar": "{" + ",".join(choices) + "}"})


def option_owners() -> dict[str, str]:
    """``{flag name: method}`` for every method option of the registered methods."""
    return {flag: name for name, options in _method_options() for flag in options.flags()}


_CACHE: dict[tuple, type] = {}


def model_arguments() -> type:
    """``ModelArguments``: :class:`BaseModelArguments` plus the flags of every registered method."""
    methods = _method_options()
    key = tuple(methods)
    if key not in _CACHE:
        taken = {f.name: "the shared model flags" for f in dataclasses.fields(BaseModelArguments)}
        extra = [_with_choices("model_name", _registered("ENCODERS")),
                 _with_choices("loss_name", _registered("LOSSES"))]
        for name, options in methods:
            for flag, kind, spec in options.argument_fields():
                if flag in taken:
                    raise ConfigError(f"method {name!r} declares --{flag}, which {taken[flag]} already define")
                taken[flag] = f"method {name!r}"
                extra.append((flag, kind, spec))
        cls = dataclasses.make_dataclass("ModelArguments", extra, bases=(BaseModelArguments,))
        cls.__module__ = __name__
        cls.__doc__ = "The model flags: the shared ones and every registered method's options (--mvr_*, ...)."
        cls.assembled_from_registry = True  # parse_dataclasses swaps it for the current one (plugins loaded since)
        _CACHE[key] = cls
    return _CACHE[key]


def given_flags(argv: Sequence[str]) -> list[str]:
    """The flag names given in ``argv`` (``--name`` / ``--name=value`` / ``--no_name``), or the keys of the
    ``.json`` config file given as its only argument."""
    argv = list(argv)
    if len(argv) == 1 and argv[0].endswith(".json") and os.path.isfile(argv[0]):
        try:
            with open(argv[0], encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return []  # the parser reports it
        return list(data) if isinstance(data, dict) else []
    return [t[2:].split("=", 1)[0] for t in argv if t.startswith("--")]


def refuse_foreign_options(argv: Sequence[str], model_name: str) -> None:
    """Refuse, in one line, the method options in ``argv`` that belong to a method other than ``model_name``
    (``--model_name dpr --mvr_num_views 8``): the model would be built without them."""
    owners = option_owners()
    foreign = []
    for flag in given_flags(argv):
        base = flag[3:] if flag.startswith("no_") and flag[3:] in owners else flag
        if owners.get(base, model_name) != model_name:
            foreign.append(f"--{base} belongs to {owners[base]}")
    if foreign:
        raise ConfigError(f"{'; '.join(foreign)}, not --model_name {model_name}: drop "
                          f"{'it' if len(foreign) == 1 else 'them'} or train that method")


def __getattr__(name: str) -> Any:
    if name == "ModelArguments":
        return model_arguments()
    if name == "MultiViewTrainingArguments":
        return _training_arguments_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _honours_warmup_ratio() -> bool:
    """Whether the installed transformers computes warm-up from ``warmup_ratio`` itself (< 5.2)."""
    from transformers import TrainingArguments

    return "warmup_ratio" in TrainingArguments.__dataclass_fields__
