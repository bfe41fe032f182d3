"""Tests of tools/testing.py: the tiny random backbones the tests and the recipes' --smoke use."""

from __future__ import annotations

import json

import torch
from transformers import AutoModel, AutoTokenizer

from tools.testing import WORDS, make_tiny_bert, make_tiny_t5


def test_tiny_bert_is_small_seeded_and_tokenizes_its_words(tmp_path):
    a, b, c = make_tiny_bert(tmp_path / "a"), make_tiny_bert(tmp_path / "b"), make_tiny_bert(tmp_path / "c", seed=1)
    config = json.loads((a / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"]) == (32, 2)
    weights = [AutoModel.from_pretrained(p).embeddings.word_embeddings.weight for p in (a, b, c)]
    torch.testing.assert_close(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])
    tokenizer = AutoTokenizer.from_pretrained(a)
    assert tokenizer.tokenize(" ".join(WORDS[:5])) == WORDS[:5]


def test_tiny_t5_encoder_and_seq2seq(tmp_path):
    encoder = make_tiny_t5(tmp_path / "enc")
    seq2seq = make_tiny_t5(tmp_path / "s2s", seq2seq=True)
    assert json.loads((encoder / "config.json").read_text())["d_model"] == 32
    assert "ForConditionalGeneration" in json.loads((seq2seq / "config.json").read_text())["architectures"][0]
    tokenizer = AutoTokenizer.from_pretrained(seq2seq)
    assert tokenizer.convert_ids_to_tokens(tokenizer(WORDS[0])["input_ids"]) == [WORDS[0], "</s>"]
