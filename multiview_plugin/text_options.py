"""The text and tokenisation options every method shares, each with its one default.

:class:`TextOptions` is the single source of these options: their names, types, defaults, allowed values and
help. Every other place that holds one of them takes the field from here instead of writing a default again:

* the saved model config (:class:`~multiview_plugin.modeling.config.EncoderConfig`), through
  :func:`config_field`;
* the train drivers' flags (``ModelArguments`` / ``DataArguments`` in :mod:`multiview_plugin.arguments`, Tevatron's
  names), through :func:`argument_field`;
* the encode driver's overrides, through :func:`override_field`: there every option defaults to None, "not given",
  so any value given on the command line (``--normalize False`` included) overrides the saved model;
* :class:`~multiview_plugin.modeling.formatting.InputFormatter`'s keyword defaults, read from :data:`DEFAULTS`.

The defaults of the other options that several drivers, functions and the saved config share are written once
here too, as constants (their help stays beside each flag): :data:`PASSAGE_FIELD_SEPARATOR` (Tevatron's
``--passage_field_separator``), :data:`TEMPERATURE` (the contrastive loss' ``--temperature``), :data:`UNTIE_ENCODER`
and :data:`MASK_DUPLICATE_POSITIVES`; :data:`OTHER_DEFAULTS` names them.

``tests/test_text_options.py`` checks that no module of the package writes one of these defaults again (as a
dataclass field, a parameter default, an ``add_argument`` default or a ``getattr`` fallback).

A bottom-floor module: it imports nothing of the package but :mod:`multiview_plugin.bounds`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from multiview_plugin.bounds import LENGTH_BOUNDS, PAD_BOUNDS, bounded

# Tevatron's poolings and their aliases: cls = first token, mean = masked average, last = last real token
POOLINGS = ("cls", "first", "mean", "avg", "average", "last", "eos")
PADDING_SIDES = ("right", "left")
# what the drivers' --help says above these options
TEXT_GROUP_DESCRIPTION = "How texts become vectors: pooling, normalisation, lengths, prefixes, Tevatron's tokenisation."


def _option(default: Any, help: str, choices: tuple[str, ...] | None = None,
            bounds: tuple | None = None) -> Any:
    metadata: dict[str, Any] = {"help": help}
    if choices:
        metadata["choices"] = choices
    if bounds:
        metadata.update(bounded(*bounds))
    return field(default=default, metadata=metadata)


@dataclass
class TextOptions:
    """How texts become vectors, for every method: pooling, normalisation, lengths, prefixes and Tevatron's
    tokenisation options. Saved with the model (``multiview_config.json``, flat keys) and applied at encoding."""

    pooling: str = _option(
        "cls", "Single-vector pooling for dpr (and dcsr's queries, dce): 'cls'/'first' (first token), "
        "'mean'/'avg'/'average' (masked mean of the last layer) or 'last'/'eos' (last real token, for decoder "
        "backbones). Multi-vector models define their own document vectors (mvr: viewer tokens, dcsr: <sent> "
        "markers).", choices=POOLINGS)
    normalize: bool = _option(
        False, "L2-normalise query and passage vectors (cosine similarity). Use with a small --temperature "
        "(e.g. 0.05) for backbones trained with cosine, such as all-MiniLM-L6-v2.")
    query_max_len: int = _option(32, "Maximum query length in tokens, special tokens included.",
                                 bounds=LENGTH_BOUNDS)
    passage_max_len: int = _option(
        128, "Maximum passage length in positions, special tokens included. MVR's extra viewer tokens share "
        "position 0 and do not count, so every method sees the same passage text.", bounds=LENGTH_BOUNDS)
    query_prefix: str = _option("", "Text prepended to every query.")
    passage_prefix: str = _option("", "Text prepended to every passage.")
    pad_to_multiple_of: int | None = _option(
        None, "Pad batches to a multiple of this length. Default: 16 when a GPU is present (Tevatron's default, "
        "tensor-core friendly), no rounding on CPU, where it only adds work; 0 = none.", bounds=PAD_BOUNDS)
    padding_side: str = _option("right", "dpr: pad batches on the 'right' or 'left' (decoder backbones).",
                                choices=PADDING_SIDES)
    append_eos_token: bool = _option(
        False, "dpr: end every query and passage with the tokenizer's eos token (RepLLaMA style; pair with "
        "--pooling eos).")
    add_special_tokens: bool = _option(True, "dpr: let the tokenizer add its special tokens ([CLS]/[SEP], BOS).")


# The other shared defaults (not text options), each written once here.
PASSAGE_FIELD_SEPARATOR = " "  # joins a passage's title and text (Tevatron's --passage_field_separator)
TEMPERATURE = 1.0  # the contrastive loss' softmax temperature tau (--temperature), saved with the model
MIN_TEMPERATURE = 0.3  # the floor of MVR's annealed schedule (eq. 8; --mvr_min_temperature)
DEFAULT_ALPHA = 0.1  # its decay rate per epoch (--mvr_alpha)
UNTIE_ENCODER = False  # separate query and passage encoders (--untie_encoder), saved with the model
MASK_DUPLICATE_POSITIVES = False  # drop in-batch copies of a query's positive (--mask_duplicate_positives)
OTHER_DEFAULTS: dict[str, Any] = {"passage_field_separator": PASSAGE_FIELD_SEPARATOR, "temperature": TEMPERATURE,
                                  "untie_encoder": UNTIE_ENCODER,
                                  "mask_duplicate_positives": MASK_DUPLICATE_POSITIVES}

SHARED_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(TextOptions)}
OPTION_NAMES: tuple[str, ...] = tuple(SHARED_FIELDS)
DEFAULTS = TextOptions()  # read-only by convention: the defaults, e.g. DEFAULTS.query_max_len


def default(name: str) -> Any:
    """The default of the shared option ``name``."""
    return SHARED_FIELDS[name].default


def config_field(name: str) -> Any:
    """The dataclass field of a saved config: the default and the bounds."""
    f = SHARED_FIELDS[name]
    return field(default=f.default, metadata={k: v for k, v in f.metadata.items() if k == "bounds"})


def argument_field(name: str) -> Any:
    """The field of a command-line dataclass (``HfArgumentParser``): the default, the help and the choices (its
    metadata goes to argparse, so bounds stay out: the dataclass checks them in ``__post_init__``)."""
    f = SHARED_FIELDS[name]
    return field(default=f.default, metadata={k: v for k, v in f.metadata.items() if k != "bounds"})


def override_field(name: str) -> Any:
    """The encode driver's field: None ("not given": the saved model's own setting), any given value overrides
    it. A bool takes ``--name``, ``--name True|False`` and ``--no_name``."""
    f = SHARED_FIELDS[name]
    shown = f.default if f.default is not None else "unset"
    help = (f"{f.metadata['help']} Not given: the saved model's own setting (a plain checkpoint: {shown!r}); "
            "given: it overrides the saved model's, logged.")
    metadata: dict[str, Any] = {"help": help}
    if "choices" in f.metadata:
        metadata["choices"] = f.metadata["choices"]
    if f.type in (bool, "bool"):
        metadata.update(nargs="?", const=True)
    return field(default=None, metadata=metadata)


def bounds_of(*names: str) -> dict[str, tuple]:
    """``{name: bounds}`` of the named options that have bounds (for ``check_fields(..., bounds=...)``)."""
    return {n: SHARED_FIELDS[n].metadata["bounds"] for n in names if "bounds" in SHARED_FIELDS[n].metadata}
