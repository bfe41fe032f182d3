"""New special tokens (MVR's viewers, DCSR's ``<sent>`` marker): added to the tokenizer, embeddings initialised."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from multiview_plugin.errors import ConfigError


def add_marker_tokens(
    tokenizer: PreTrainedTokenizerBase,
    encoders: Sequence[PreTrainedModel],
    tokens: Sequence[str],
    init: str = "random",
    seed: int = 0,
) -> list[int]:
    """Add ``tokens`` as special tokens and initialise their input embeddings in every encoder.

    ``init='random'``: Gaussian rows at the scale of the backbone's own word embeddings, so a new token is as
    loud as an ordinary one (MiniLM rows have std 0.056, not BERT's 0.02 init range). ``init='cls'``: copies
    of the [CLS] (or BOS) embedding plus 10% of that noise, so copies are not identical. Returns the new ids.
    """
    present = [t for t in tokens if t in tokenizer.get_vocab()]
    if present:
        raise ConfigError(f"backbone tokenizer already has the tokens {present}")
    if init not in ("random", "cls"):
        raise ConfigError(f"token init must be 'random' or 'cls', got {init!r}")
    tokenizer.add_tokens(list(tokens), special_tokens=True)
    new_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(tokens)))
    generator = torch.Generator().manual_seed(seed)
    unique = list({id(e): e for e in encoders}.values())  # tied encoders are one module
    for encoder in unique:
        old_rows = encoder.get_input_embeddings().weight.shape[0]
        # never shrink: many LLMs pad their matrix beyond the tokenizer (rows it never emits); new ids then land
        # on such unused rows, and the shape (often a multiple of 64 for fast kernels) is kept
        encoder.resize_token_embeddings(max(len(tokenizer), old_rows), mean_resizing=False)
        weight = encoder.get_input_embeddings().weight
        std = float(weight[:old_rows].detach().float().std())
        noise = torch.randn(len(new_ids), weight.shape[1], generator=generator) * std
        with torch.no_grad():
            if init == "cls":
                cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
                if cls_id is None:
                    raise ConfigError("token init 'cls' needs a tokenizer with a [CLS] or BOS token")
                weight[new_ids] = weight[cls_id].unsqueeze(0) + 0.1 * noise.to(weight.dtype)
            else:
                weight[new_ids] = noise.to(weight.dtype)
    return new_ids.tolist()


def token_ids(tokenizer: PreTrainedTokenizerBase, tokens: Sequence[str], model_name: str) -> list[int]:
    """Ids of tokens a model added; a clear error when the tokenizer lacks them (a model of another kind)."""
    ids = tokenizer.convert_tokens_to_ids(list(tokens))
    missing = [t for t, i in zip(tokens, ids) if i is None or i == tokenizer.unk_token_id]
    if missing:
        raise ConfigError(f"tokenizer lacks the {model_name} tokens {missing}: was the model built with {model_name}?")
    return ids
