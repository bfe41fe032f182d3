"""ME-BERT: the first k token states as views, fewer views for short passages."""

import pytest
import torch

from multiview_plugin.errors import ConfigError
from tests.modeling.test_mlr import TEXTS, build


def test_mebert_first_k_states_and_short_passages(tiny_bert):
    model = build("mebert", tiny_bert, mebert_num_vectors=4).eval()
    batch = model.formatter.passages(["paris", *TEXTS])
    reps, mask = model.encode_passage(batch)
    hidden = model.query_encoder(**batch).last_hidden_state
    assert reps.shape == (4, 4, 32)
    assert torch.allclose(reps, hidden[:, :4])
    assert mask[0].tolist() == [True, True, True, False]  # [CLS] paris [SEP]: 3 tokens, 3 views
    assert mask[1:].all()
    with pytest.raises(ConfigError, match="--mebert_num_vectors"):
        build("mebert", tiny_bert, mebert_num_vectors=0)
