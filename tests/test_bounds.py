"""Tests of multiview_plugin/bounds.py: sizes given as flags share the saved config's bounds, refused at parse time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.train import main as train_main
from tests.conftest import one_line_error, write_topics_corpus

COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "32", "--dataloader_num_workers", "0"]


def _train_args(tiny_bert: Path, train_file: Path, out: Path, *flags: str) -> list[str]:
    return ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            *COMMON, *flags]


@pytest.mark.parametrize("flags,needle", [
    (["--model_name", "mvr", "--mvr_num_views", "1000000000"],
     "--mvr_num_views must be >= 1 and <= 1024, got 1000000000"),
    (["--passage_max_len", "1000000000"], "--passage_max_len must be >= 1 and <= 1048576, got 1000000000"),
    (["--pad_to_multiple_of", "100000"], "--pad_to_multiple_of must be >= 0 and <= 1024"),
    (["--lora_r", "1000000000"], "--lora_r must be >= 1 and <= 8192"),
    (["--num_proc", "0"], "--num_proc must be >= 1, got 0"),
])
def test_the_same_sizes_as_flags_are_refused(tiny_bert, train_file, tmp_path, capsys, flags, needle):
    """The flags share the saved config's bounds and are refused at parse time, before any loading."""
    start = time.perf_counter()
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out", *flags)) == 2
    assert time.perf_counter() - start < 30
    one_line_error(capsys, needle)
    assert not (tmp_path / "out").exists()


def test_encode_override_out_of_bounds_is_refused(saved_mvr, tmp_path, capsys):
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(saved_mvr), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl"), "--passage_max_len", "1000000000"]) == 2
    one_line_error(capsys, "--passage_max_len must be >= 1 and <= 1048576, got 1000000000")
