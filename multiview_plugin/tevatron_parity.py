"""Tevatron v2 flag parity: which of Tevatron's flags each driver refuses, and why, and what to use instead.

Every other Tevatron flag is accepted with Tevatron's meaning (``tests/test_tevatron_parity.py`` checks this
against ``tests/fixtures/tevatron_flags.json``, a snapshot of Tevatron's parsers written by
``tools/tevatron_flags.py``, which also writes the parity table of the documentation from these tables). The
encode driver, like Tevatron's, also accepts the training flags: the ones it has no use for are logged as ignored
(Tevatron's encode ignores them silently). A bottom-floor module: :mod:`multiview_plugin.cli` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from multiview_plugin.errors import ConfigError

_MULTIMODAL = "multimodal inputs are not supported (text only); drop the flag"
_SPLADE = "a SPLADE flag (tevatron.retriever.driver.train_splade); multiview_plugin trains dense models only"

REFUSED_TRAIN: dict[str, str] = {
    "is_bidirectional": _SPLADE,
    "pooling_strategy": _SPLADE + " (dense poolings: --pooling)",
    "train_yaml": "several training sets: give them comma-separated in --dataset_path",
    "assets_path": _MULTIMODAL,
    "encode_text": _MULTIMODAL,
    "encode_image": _MULTIMODAL,
    "encode_audio": _MULTIMODAL,
    "encode_video": _MULTIMODAL,
    "distil_temperature": "distillation (tevatron.retriever.driver.train_distil) is not supported; train with "
                          "hard negatives (--train_group_size)",
}

REFUSED_ENCODE: dict[str, str] = {
    **REFUSED_TRAIN,
    # a LoRA-trained folder of ours already holds the merged weights; --lora_name_or_path merges an adapter
    **{k: "a LoRA training flag: drop it (encoding takes --lora_name_or_path)"
       for k in ("lora", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")},
}

REFUSED_SEARCH: dict[str, str] = {}

REFUSED = {"train": REFUSED_TRAIN, "encode": REFUSED_ENCODE, "search": REFUSED_SEARCH}

# Tevatron's DataArguments are shared by its train and encode drivers; these four only encoding uses. Our train
# driver parses them (one config file can serve both drivers) but refuses a value other than the default, which
# it would otherwise ignore (Tevatron's train ignores them silently).
ENCODE_ONLY: tuple[str, ...] = ("dataset_number_of_shards", "dataset_shard_index", "encode_is_query",
                                "encode_output_path")
ENCODE_ONLY_NOTE = ("an encode flag (python -m multiview_plugin.driver.encode): train refuses a non-default value "
                    "instead of ignoring it as Tevatron's train does")

# Flags the train driver honours only where they can act; elsewhere it logs a WARNING that they are ignored.
CONDITIONAL_TRAIN: dict[str, str] = {
    "fp16": "mixed precision in float16 needs a GPU: on CPU train logs a WARNING that it is ignored and trains in "
            "float32, as transformers does there without a word (Tevatron's train also loads the weights in "
            "float16); --bf16 works on CPU (encode: --fp16 stores float16 vectors and autocasts on GPU)",
    "num_proc": "processes for hub datasets (--dataset_name: load_dataset and validation, as Tevatron) and for "
                "dcsr's sentence preparation; with local train files for other methods train logs a WARNING that "
                "it is ignored",
}

# Flags accepted with a deliberately different default or meaning (shown in the README's parity table).
DIFFERENCES: dict[str, str] = {
    "attn_implementation": "default: transformers' choice (sdpa) instead of flash_attention_2, which needs "
                           "flash-attn and a GPU",
    "pad_to_multiple_of": "default: 16 on GPU as Tevatron, no rounding on CPU (it only adds work there); pass 16 "
                          "to force",
    "grad_cache": "also for multi-vector models (Tevatron's handles single vectors only)",
}


# What to know about some accepted flags (the note column of the README's parity table).
NOTES: dict[str, str] = {
    "config_name": "train: the backbone is built with this config (a folder, config.json or hub id) and the "
                   "checkpoint's weights, as the Hugging Face examples (Tevatron's train ignores it); refused "
                   "with a saved multiview model, whose config is its own",
    "tokenizer_name": "train: refused with a saved multiview model, whose tokenizer is its own",
    "lora": "LoRA adapters through peft (pip install 'multiview_plugin[lora]') for every method; the output folder "
            "is the merged model plus the adapter in lora_adapter/",
    "lora_name_or_path": "train: start from this adapter, trainable (or one of our LoRA-trained folders); encode: "
                         "merge it into --model_name_or_path, as Tevatron",
    "lora_target_modules": "Tevatron's default names LLaMA-style layers: BERT-like backbones (all-MiniLM-L6-v2) "
                           "need query,key,value,dense; names no module has are an error that lists the backbone's",
}


def flag_name(token: str) -> str | None:
    """``--name`` / ``--name=value`` → ``name``; anything else (values) → None."""
    if not token.startswith("--"):
        return None
    return token[2:].split("=", 1)[0]


def refuse_unsupported(argv: Sequence[str], driver: str) -> None:
    """Raise a one-line :class:`ConfigError` for the first Tevatron flag in ``argv`` that ``driver`` refuses."""
    refused = REFUSED[driver]
    for token in argv:
        name = flag_name(token)
        if name is None:
            continue
        base = name[3:] if name.startswith("no_") and name[3:] in refused else name
        if base in refused:
            raise ConfigError(f"--{base} (Tevatron) is not supported by the {driver} driver: {refused[base]}")
