"""Bounded work and fingerprinted inputs on the newer paths: search depths capped at the collection, record texts
bounded before tokenizing, index files / BM25 corpora / training data / generate_queries partials that changed
since they were recorded are refused (one line) instead of used."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import read_shard
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS, write_topics_corpus


def _one_line_error(capsys, *needles: str) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    lines = [line[line.index("error: "):] for line in captured.err.splitlines() if "error: " in line]
    assert len(lines) == 1, captured.err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def setup(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """A tiny mvr model (passage_max_len 32), its corpus (8 documents), query file and an index folder."""
    root = tmp_path_factory.mktemp("bounds")
    torch.manual_seed(0)
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=2),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
    model.save(root / "mvr")
    corpus = write_topics_corpus(root / "corpus.jsonl")
    queries = root / "queries.tsv"
    queries.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    common = ["--model_name_or_path", str(root / "mvr"), "--per_device_eval_batch_size", "4"]
    assert encode_main([*common, "--dataset_path", str(corpus), "--encode_output_path", str(root / "c.pkl")]) == 0
    assert encode_main([*common, "--dataset_path", str(queries), "--encode_is_query",
                        "--encode_output_path", str(root / "q.pkl")]) == 0
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx")]) == 0
    return {"root": root, "model": root / "mvr", "corpus": corpus, "queries": queries, "shard": root / "c.pkl",
            "qshard": root / "q.pkl", "index": root / "idx"}


# --------------------------------------------------------------------------- bounded memory


@pytest.mark.parametrize("hits", ["5000000", str(10 ** 12)])
def test_search_depth_is_capped_at_the_number_of_documents(setup, tmp_path, caplog, hits):
    """main: --hits 5000000 on a 60-document index grew to 8.3 GB; --hits 10**12 was a numpy allocation
    traceback. Now: at most the 8 documents per query, and a log line says so."""
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(setup["index"]), "--encoded_queries", str(setup["qshard"]),
                        "--output", str(run), "--hits", hits]) == 0
    lines = run.read_text().splitlines()
    assert len(lines) == 8 * len(TOPICS)
    assert f"--hits {hits} exceeds the 8 documents searched" in caplog.text
    tev = tmp_path / "tev.txt"
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(setup["qshard"]), "--passage_reps", str(setup["shard"]),
                            "--depth", hits, "--save_ranking_to", str(tev), "--save_text", *extra]) == 0
        assert len(tev.read_text().splitlines()) == 8 * len(TOPICS)
    assert f"--depth {hits} exceeds the 8 documents searched" in caplog.text


def test_a_huge_record_is_read_only_as_far_as_the_model_reads(setup, tmp_path, caplog):
    """main: a .jsonl.gz holding one 512 MiB line went to the tokenizer whole (6.4 GB, then an abort). Now the
    text is cut at 100 characters per token of max length, said once with the count, and the vectors are the
    same as the untruncated text's (the model reads 32 tokens)."""
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    big = tmp_path / "big.jsonl.gz"
    long_text = "paris is the capital of france " * 40_000  # 1.2 M characters, 3200 x max_len
    with gzip.open(big, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"docid": "long", "text": long_text}) + "\n")
        f.write(json.dumps({"docid": "short", "text": "a cat is a small animal"}) + "\n")
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"docid": "long", "text": long_text[:4000]}) + "\n")
    common = ["--model_name_or_path", str(setup["model"])]
    assert encode_main([*common, "--dataset_path", str(big), "--encode_output_path", str(tmp_path / "b.pkl")]) == 0
    assert "1 documents longer than 3200 characters (100 per token of --passage_max_len 32)" in caplog.text
    assert encode_main([*common, "--dataset_path", str(small), "--encode_output_path", str(tmp_path / "s.pkl")]) == 0
    reps, lookup, _ = read_shard(tmp_path / "b.pkl")
    ref, ref_lookup, _ = read_shard(tmp_path / "s.pkl")
    rows = [i for i, d in enumerate(lookup) if d.startswith("long")]
    np.testing.assert_allclose(reps[rows], ref, rtol=1e-5, atol=1e-6)
