"""Tests of multiview_plugin/modeling/formatting.py: texts → model inputs (the shared text options' effect on
encode: tests/driver/test_encode.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from multiview_plugin.modeling.formatting import InputFormatter, pad_sequences


def test_pad_sequences_right_pads_to_a_multiple():
    out = pad_sequences([[1, 2, 3], [4]], pad_value=0, multiple_of=4)
    assert out.tolist() == [[1, 2, 3, 0], [4, 0, 0, 0]] and out.dtype == torch.long
    assert pad_sequences([[1], [2, 3]], pad_value=9).tolist() == [[1, 9], [2, 3]]
    assert pad_sequences([], pad_value=0).shape == (0, 0)


@pytest.fixture(scope="module")
def tokenizer(tiny_bert):
    return AutoTokenizer.from_pretrained(tiny_bert)


def test_prefixes_lengths_and_padding(tokenizer):
    fmt = InputFormatter(tokenizer, query_max_len=8, passage_max_len=8, query_prefix="the ",
                         pad_to_multiple_of=4)
    q = fmt.queries(["paris", "the capital of france is a large city by the river"])
    assert q["input_ids"].shape == (2, 8) and q["attention_mask"][1].sum() == 8  # cut at 8
    assert q["attention_mask"][0].sum() == 4
    assert tokenizer.decode(q["input_ids"][0][q["attention_mask"][0].bool()]) == "[CLS] the paris [SEP]"
    assert fmt.passages(["moon"])["input_ids"].shape[1] == 4


def test_tevatron_options_pad_left_append_eos_and_drop_special_tokens(tokenizer):
    text = ["paris is big", "moon"]
    left = InputFormatter(tokenizer, padding_side="left", pad_to_multiple_of=0).queries(text)
    assert left["attention_mask"][1].tolist()[0] == 0 and left["attention_mask"][1].tolist()[-1] == 1
    assert tokenizer.padding_side == "right"  # restored after padding
    bare = InputFormatter(tokenizer, add_special_tokens=False, pad_to_multiple_of=0).queries(["moon"])
    assert bare["input_ids"][0].tolist() == tokenizer("moon", add_special_tokens=False)["input_ids"]
    tokenizer.eos_token = "[SEP]"
    try:
        eos = InputFormatter(tokenizer, query_max_len=4, append_eos_token=True, pad_to_multiple_of=0)
        ids = eos.queries(["the capital of france"])["input_ids"][0].tolist()
        assert len(ids) == 4 and ids[-1] == tokenizer.sep_token_id
    finally:
        tokenizer.eos_token = None
    with pytest.raises(ValueError, match="--append_eos_token: tokenizer .* has no eos token"):
        InputFormatter(tokenizer, append_eos_token=True).queries(["x"])


def test_tokenize_plain_and_assemble(tokenizer):
    fmt = InputFormatter(tokenizer, pad_to_multiple_of=0)
    ids = fmt.tokenize_plain(["paris is the capital", "moon"], 3)
    assert [len(s) for s in ids] == [3, 1] and tokenizer.cls_token_id not in ids[0]
    assert fmt.end_token_id() == tokenizer.sep_token_id
    batch = fmt.assemble([[1, 2, 3], [4]], position_ids=[[0, 1, 2], [0]])
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
