"""Turning texts into model inputs.

A formatter holds only the tokenizer and lengths (no weights), so collators and data-loader workers can carry
it; each encoder class names the formatter that defines its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from multiview_plugin.text_options import DEFAULTS


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_value: int, multiple_of: int | None = None
) -> torch.Tensor:
    """Right-pad integer lists into a (B, L) tensor; L rounded up to ``multiple_of``."""
    length = max((len(s) for s in sequences), default=0)
    if multiple_of:
        length = -(-length // multiple_of) * multiple_of
    out = torch.full((len(sequences), length), pad_value, dtype=torch.long)
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out


class InputFormatter:
    """Standard inputs: the tokenizer's own special tokens, natural position ids (DPR and friends)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        query_max_len: int = DEFAULTS.query_max_len,
        passage_max_len: int = DEFAULTS.passage_max_len,
        query_prefix: str = DEFAULTS.query_prefix,
        passage_prefix: str = DEFAULTS.passage_prefix,
        pad_to_multiple_of: int | None = DEFAULTS.pad_to_multiple_of,
        padding_side: str = DEFAULTS.padding_side,
        append_eos_token: bool = DEFAULTS.append_eos_token,
        add_special_tokens: bool = DEFAULTS.add_special_tokens,
    ):
        self.tokenizer = tokenizer
        self.padding_side = padding_side
        self.append_eos_token = append_eos_token
        self.add_special_tokens = add_special_tokens
        self.query_max_len = query_max_len
        self.passage_max_len = passage_max_len
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        if pad_to_multiple_of is None:  # auto: Tevatron's 16 for GPU tensor cores; on CPU it only adds work
            pad_to_multiple_of = 16 if torch.cuda.is_available() else 0
        self.pad_to_multiple_of = pad_to_multiple_of or None
        self.uses_token_type_ids = "token_type_ids" in tokenizer.model_input_names

    def queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return self._encode([self.query_prefix + t for t in texts], self.query_max_len)

    def passages(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return self._encode([self.passage_prefix + t for t in texts], self.passage_max_len)

    def _encode(self, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
        if self.append_eos_token or self.padding_side != "right" or not self.add_special_tokens:
            return self._encode_tevatron(texts, max_len)
        batch = self.tokenizer(
            texts,
            max_length=max_len,
            truncation=True,
            padding=True,
            pad_to_multiple_of=self.pad_to_multiple_of,
            return_tensors="pt",
        )
        return dict(batch)

    def _encode_tevatron(self, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
        """Tevatron's collator: tokenise to ``max_len`` (one less with ``append_eos_token``, whose eos id then
        ends every text), then pad on ``padding_side``."""
        tok = self.tokenizer
        eos = [tok.eos_token_id] if self.append_eos_token else []
        if self.append_eos_token and tok.eos_token_id is None:
            raise ValueError(f"--append_eos_token: tokenizer {type(tok).__name__} has no eos token")
        ids = tok(texts, max_length=max_len - len(eos), truncation=True, padding=False, return_attention_mask=False,
                  return_token_type_ids=False, add_special_tokens=self.add_special_tokens)["input_ids"]
        side = tok.padding_side
        tok.padding_side = self.padding_side
        try:
            batch = tok.pad({"input_ids": [seq + eos for seq in ids]}, padding=True,
                            pad_to_multiple_of=self.pad_to_multiple_of, return_attention_mask=True,
                            return_tensors="pt")
        finally:
            tok.padding_side = side
        return dict(batch)

    def tokenize_plain(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        """Token ids without special tokens, truncated to ``max_len``."""
        max_len = max(max_len, 0)
        ids = self.tokenizer(list(texts), add_special_tokens=False, truncation=max_len > 0,
                             max_length=max_len or None)["input_ids"]
        return [seq[:max_len] for seq in ids]

    def end_token_id(self) -> int:
        tok = self.tokenizer
        end = tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id
        if end is None:
            raise ValueError(f"tokenizer {type(tok).__name__} has neither a sep nor an eos token")
        return end

    def assemble(
        self, sequences: list[list[int]], position_ids: list[list[int]] | None = None
    ) -> dict[str, torch.Tensor]:
        """Pad hand-built sequences into a batch with attention mask (and position ids when given)."""
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = pad_sequences(sequences, pad_id, self.pad_to_multiple_of)
        lengths = torch.tensor([len(s) for s in sequences])
        attention_mask = (torch.arange(input_ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).long()
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.uses_token_type_ids:
            batch["token_type_ids"] = torch.zeros_like(input_ids)
        if position_ids is not None:
            batch["position_ids"] = pad_sequences(position_ids, 0, self.pad_to_multiple_of)
        return batch
