"""DPR: [CLS] and mean pooling, and T5 backbones (no [CLS]: mean pooling only)."""

import pytest
import torch

from multiview_plugin.errors import ConfigError
from tests.conftest import make_tiny_t5
from tests.modeling.test_base import TEXTS, build


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    return make_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))


def test_dpr_pooling(tiny_bert):
    cls = build("dpr", tiny_bert).eval()
    mean = build("dpr", tiny_bert, pooling="mean", normalize=True).eval()
    batch = cls.formatter.passages(TEXTS)
    hidden = cls.query_encoder(**batch).last_hidden_state
    reps, mask = cls.encode_passage(batch)
    assert reps.shape == (3, 1, 32) and mask.all()
    assert torch.allclose(reps[:, 0], hidden[:, 0])
    m = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)
    assert torch.allclose(mean.encode_passage(batch)[0][:, 0], expected, atol=1e-6)


def test_dpr_on_t5_needs_mean_pooling(tiny_t5):
    with pytest.raises(ConfigError, match="T5 encoders have no \\[CLS\\] token"):
        build("dpr", tiny_t5)
    model = build("dpr", tiny_t5, pooling="mean").eval()
    reps, _ = model.encode_passage(model.formatter.passages(TEXTS))
    assert reps.shape == (3, 1, 32)
