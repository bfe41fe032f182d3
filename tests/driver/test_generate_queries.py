"""Tests of multiview_plugin/driver/generate_queries.py: the command line around encoding/doc2query.py (the
generation itself: tests/encoding/test_doc2query.py)."""

from __future__ import annotations

from multiview_plugin.driver.generate_queries import main as generate_main
from tests.conftest import one_line_error, write_topics_corpus


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "q.jsonl"
    assert generate_main(["--model_name_or_path", str(tmp_path / "no-model"), "--corpus_path", str(corpus),
                          "--output", str(corpus)]) == 2
    one_line_error(capsys, "--output", "the same file as", "--corpus_path")
    assert generate_main(["--model_name_or_path", str(tmp_path / "no-model"), "--corpus_path", str(corpus),
                          "--output", str(out), "--unknown_flag", "1"]) == 2
    one_line_error(capsys, "unrecognised arguments: --unknown_flag 1")
    assert not out.exists() and not (tmp_path / "q.jsonl.json").exists()
