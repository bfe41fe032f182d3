"""Tests of multiview_plugin/arguments.py: the command-line argument classes."""

from __future__ import annotations

import pytest

from multiview_plugin.arguments import MultiViewTrainingArguments


def test_warmup_ratio_is_honoured():
    args = MultiViewTrainingArguments(output_dir="unused", warmup_ratio=0.1)
    assert args.get_warmup_steps(100) == 10
    assert MultiViewTrainingArguments(output_dir="unused", warmup_ratio=0.0).get_warmup_steps(100) == 0
    # an explicit --warmup_steps wins, as in Tevatron / transformers
    assert MultiViewTrainingArguments(output_dir="unused", warmup_steps=3).get_warmup_steps(100) == 3
    with pytest.raises(ValueError, match="warmup_ratio"):
        MultiViewTrainingArguments(output_dir="unused", warmup_ratio=1.5)
