"""Fixtures of the encoding tests: saved tiny models (mvr, another mvr checkpoint, dpr), a corpus, queries."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS, write_topics_corpus


def _build(tiny_bert: Path, folder: Path, name: str = "mvr", seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = get_encoder_class(name).build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name=name, mvr_num_views=3),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
    if seed:  # "another checkpoint": the same architecture, other weights
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.01 * torch.randn_like(param))
    model.save(folder)
    return folder


@pytest.fixture(scope="module")
def models(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """mvr, the same mvr with other weights (another checkpoint), and a dpr model."""
    return {"mvr": _build(tiny_bert, tmp_path_factory.mktemp("mvr")),
            "mvr_other": _build(tiny_bert, tmp_path_factory.mktemp("mvr_other"), seed=1),
            "dpr": _build(tiny_bert, tmp_path_factory.mktemp("dpr"), name="dpr")}


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_topics_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture
def queries(tmp_path) -> Path:
    path = tmp_path / "queries.tsv"
    path.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    return path
