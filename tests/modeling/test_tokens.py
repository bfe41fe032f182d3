"""Tests of multiview_plugin/modeling/tokens.py: marker tokens added to a tokenizer and its models."""

from __future__ import annotations

import torch


def test_added_tokens_never_shrink_a_padded_embedding_matrix(tiny_bert):
    from transformers import AutoModel, AutoTokenizer

    from multiview_plugin.modeling.tokens import add_marker_tokens

    tokenizer, model = AutoTokenizer.from_pretrained(tiny_bert), AutoModel.from_pretrained(tiny_bert)
    padded = len(tokenizer) + 64
    model.resize_token_embeddings(padded)  # as LLMs pad their vocabulary: rows the tokenizer never emits
    before = model.get_input_embeddings().weight.detach().clone()
    ids = add_marker_tokens(tokenizer, [model], ["<v1>", "<v2>"])
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == padded and all(len(tokenizer) - 2 <= i < padded for i in ids)
    # every row the tokenizer could already emit is untouched
    torch.testing.assert_close(weight[: len(tokenizer) - 2], before[: len(tokenizer) - 2], rtol=0, atol=0)
