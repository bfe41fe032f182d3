"""Tests of multiview_plugin/driver/search.py: the search driver (Pyserini-style over an index, Tevatron-style
over shards), its one-line errors and its reading of shards without a sidecar."""

from __future__ import annotations

import json
import logging
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.mine_negatives import main as mine_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import NonFiniteVectorsError
from multiview_plugin.evaluation.runs import read_run
from multiview_plugin.search import MultiVectorSearcher
from tests.conftest import TOPICS, one_line_error, poisoned_copy, write_train_file
from tests.strategies import (
    DAMAGE,
    PER_KIND,
    PLAIN,
    bounded,
    build_index_folder,
    damage,
    run_driver,
    workdir,
    write_lines,
)


def test_search_refuses_non_finite_query_vectors(mvr_index, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "q.pkl"
    qid = poisoned_copy(mvr_index["qshard"], bad, row=2)
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(mvr_index["index"]), "--encoded_queries", str(bad), "--output", str(run)]) == 2
    one_line_error(capsys, str(bad), repr(qid))
    assert search_main(["--query_reps", str(bad), "--passage_reps", str(mvr_index["shard"]),
                        "--save_ranking_to", str(run)]) == 2
    one_line_error(capsys, str(bad), repr(qid))
    # queries encoded on the fly by a model that produces NaN for one of them
    original = MultiVectorSearcher.encode

    def nan_for_third(self, texts):
        reps = original(self, texts)
        reps[2] = np.nan
        return reps

    monkeypatch.setattr(MultiVectorSearcher, "encode", nan_for_third)
    assert search_main(["--index", str(mvr_index["index"]), "--topics", str(mvr_index["queries"]), "--encoder",
                        str(mvr_index["model"]), "--output", str(run)]) == 2
    one_line_error(capsys, str(mvr_index["queries"]), "'q2'")
    assert not run.exists()
    # the library call refuses too (rows named)
    searcher = MultiVectorSearcher(mvr_index["index"])
    with pytest.raises(NonFiniteVectorsError, match=r"rows \[0\]"):
        searcher.search_vectors(np.full((1, searcher.store.dim), np.nan, dtype=np.float32), 3)


@pytest.fixture
def qrels(tmp_path) -> Path:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return path


def _bare(shard: Path, out: Path) -> Path:
    """The pickle of ``shard`` without its sidecar (a plain Tevatron pickle)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shard.read_bytes())
    return out


def _warnings(caplog, path: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and str(path) in r.getMessage()]


def _ranked(run: Path, fmt: str = "tevatron") -> dict[str, list[str]]:
    return {q: [d for d, _ in hits] for q, hits in read_run(run, fmt).items()}


def test_every_driver_reads_a_sidecar_less_multi_view_shard_the_same_way(mvr_index, tmp_path, caplog):
    """main: Tevatron-style search ranked such a shard's rows as documents 'd0#1' (single-vector), while the index
    driver read the same file as multi-vector. Now each driver infers multi-vector from the docid#j lookup and
    warns, naming the file, that its model fingerprint and completeness cannot be checked."""
    caplog.set_level("WARNING", logger="multiview_plugin")
    bare = _bare(mvr_index["shard"], tmp_path / "bare" / "c.pkl")
    tevatron = ["--query_reps", str(mvr_index["qshard"]), "--save_text", "--depth", "3"]
    ref = tmp_path / "ref.txt"
    assert search_main([*tevatron, "--passage_reps", str(mvr_index["shard"]), "--save_ranking_to", str(ref)]) == 0
    expected = _ranked(ref)
    assert all("#" not in d for docs in expected.values() for d in docs)
    for extra in ([], ["--shard_search"]):
        caplog.clear()
        run = tmp_path / f"run{len(extra)}.txt"
        assert search_main([*tevatron, "--passage_reps", str(bare), "--save_ranking_to", str(run), *extra]) == 0
        assert _ranked(run) == expected
        (warning,) = _warnings(caplog, bare)
        assert "multi-vector" in warning and "model fingerprint" in warning and "complete" in warning
    caplog.clear()
    index = tmp_path / "idx"
    assert index_main(["--passage_reps", str(bare), "--index_dir", str(index)]) == 0
    assert "multi-vector" in _warnings(caplog, bare)[0]
    meta, ref_meta = (json.loads((i / "multiview.json").read_text()) for i in (index, mvr_index["index"]))
    assert meta["view_ids"] is True and meta["model_fingerprint"] is None
    assert {k: meta[k] for k in ("num_docs", "num_vectors", "views_per_doc")} == \
        {k: ref_meta[k] for k in ("num_docs", "num_vectors", "views_per_doc")}
    assert (index / "docid").read_text() == (mvr_index["index"] / "docid").read_text()
    # search over the index (encoded queries, or --encoder with explanations), analyze and mine_negatives
    caplog.clear()
    run = tmp_path / "run.pyserini"
    assert search_main(["--index", str(index), "--encoded_queries", str(mvr_index["qshard"]), "--output", str(run),
                        "--output_format", "tevatron", "--hits", "3"]) == 0
    assert _ranked(run) == expected
    assert "no model fingerprint" in _warnings(caplog, index)[0]
    caplog.clear()
    explained = tmp_path / "explain.jsonl"
    assert search_main(["--index", str(index), "--topics", str(mvr_index["queries"]), "--encoder",
                        str(mvr_index["model"]),
                        "--output", str(run), "--output_format", "tevatron", "--hits", "3",
                        "--explain", str(explained)]) == 0
    assert _ranked(run) == expected
    assert "cannot check that" in _warnings(caplog, index)[0]
    lines = [json.loads(x) for x in explained.read_text().splitlines()]
    assert lines and all("#" not in x["docid"] and x["num_views"] == 2 for x in lines)
    from multiview_plugin.driver.analyze import main as analyze_main

    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(len(TOPICS))))
    results = []
    for folder in (mvr_index["index"], index):
        out = tmp_path / f"analysis-{folder.name}-{folder.parent.name}"
        assert analyze_main(["--index", str(folder), "--topics", str(mvr_index["queries"]), "--qrels", str(qrels),
                             "--encoder", str(mvr_index["model"]), "--output_dir", str(out)]) == 0
        results.append(json.loads((out / "analysis.json").read_text()))
    # what only a sidecar records (the model, its view labels and temperature) is missing; the numbers agree
    recorded = {"index", "model_name", "view_kind", "view_labels", "model_temperature",
                "local_variation_model_temperature"}
    assert {k: v for k, v in results[1].items() if k not in recorded} == \
        {k: v for k, v in results[0].items() if k not in recorded}
    assert results[1]["views_per_document"] == results[0]["views_per_document"]
    train = write_train_file(tmp_path / "train.jsonl", n_copies=1)
    mined = []
    for folder in (mvr_index["index"], index):
        out = tmp_path / f"mined-{len(mined)}.jsonl"
        assert mine_main(["--model_name_or_path", str(mvr_index["model"]), "--index", str(folder), "--dataset_path",
                          str(train), "--corpus_path", str(mvr_index["corpus"]), "--output", str(out),
                          "--num_negatives", "2", "--depth", "4"]) == 0
        mined.append(out.read_text())
    assert mined[0] == mined[1]


def test_sidecar_less_query_pickle_is_searched_with_a_warning_naming_it(mvr_index, tmp_path, caplog):
    """main: a query pickle without sidecar (of any model) was searched against fingerprinted passages and
    indexes without a word."""
    caplog.set_level("WARNING", logger="multiview_plugin")
    bare = _bare(mvr_index["qshard"], tmp_path / "q.pkl")
    run = tmp_path / "run.txt"
    for argv in (["--index", str(mvr_index["index"]), "--encoded_queries", str(bare), "--output", str(run)],
                 ["--query_reps", str(bare), "--passage_reps", str(mvr_index["shard"]), "--save_ranking_to", str(run)]):
        caplog.clear()
        assert search_main(argv) == 0
        (warning,) = _warnings(caplog, bare)
        assert "fingerprint cannot be checked" in warning
        assert str(mvr_index["index"] if "--index" in argv else mvr_index["shard"]) in warning


def test_query_pickle_of_another_dim_is_one_line_naming_it(mvr_index, tmp_path, capsys):
    """main: the error did not name the query file; with shards without sidecars it came only from Faiss' search."""
    q7 = tmp_path / "q7.pkl"
    q7.write_bytes(pickle.dumps((np.ones((2, 7), dtype=np.float32), ["a", "b"]), protocol=4))
    dim = json.loads((mvr_index["index"] / "multiview.json").read_text())["dim"]
    bare = _bare(mvr_index["shard"], tmp_path / "bare" / "c.pkl")
    run = tmp_path / "run.txt"
    assert search_main(["--index", str(mvr_index["index"]), "--encoded_queries", str(q7), "--output", str(run)]) == 2
    one_line_error(capsys, str(q7), "dim 7", f"(N, {dim})", str(mvr_index["index"]))
    for passages in (mvr_index["shard"], bare):
        for extra in ([], ["--shard_search"]):
            assert search_main(["--query_reps", str(q7), "--passage_reps", str(passages), "--save_ranking_to",
                                str(run), *extra]) == 2
            one_line_error(capsys, str(q7), "dim 7", f"(N, {dim})")
    assert not run.exists()


def test_sidecar_less_passage_shard_given_as_queries_is_one_line(mvr_index, tmp_path, capsys):
    """main: a multi-vector passage pickle given as --query_reps was searched as 16 queries 'd0#0', 'd0#1', ..."""
    bare = _bare(mvr_index["shard"], tmp_path / "c.pkl")
    run = tmp_path / "run.txt"
    assert search_main(["--query_reps", str(bare), "--passage_reps", str(mvr_index["shard"]), "--save_ranking_to",
                        str(run)]) == 2
    one_line_error(capsys, str(bare), "multi-vector passage shard")
    assert not run.exists()


@pytest.mark.parametrize("hits", ["5000000", str(10 ** 12)])
def test_search_depth_is_capped_at_the_number_of_documents(mvr_index, tmp_path, caplog, hits):
    """main: --hits 5000000 on a 60-document index grew to 8.3 GB; --hits 10**12 was a numpy allocation
    traceback. Now: at most the 8 documents per query, and a log line says so."""
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(mvr_index["index"]), "--encoded_queries", str(mvr_index["qshard"]),
                        "--output", str(run), "--hits", hits]) == 0
    lines = run.read_text().splitlines()
    assert len(lines) == 8 * len(TOPICS)
    assert f"--hits {hits} exceeds the 8 documents searched" in caplog.text
    tev = tmp_path / "tev.txt"
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(mvr_index["qshard"]), "--passage_reps", str(mvr_index["shard"]),
                            "--depth", hits, "--save_ranking_to", str(tev), "--save_text", *extra]) == 0
        assert len(tev.read_text().splitlines()) == 8 * len(TOPICS)
    assert f"--depth {hits} exceeds the 8 documents searched" in caplog.text


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Hybrid search: only the indexed BM25 corpus fuses.
# Strategies and helpers: tests/strategies.py.


@pytest.fixture(scope="module")
def index_folder(tmp_path_factory) -> dict[str, Path]:
    """A small index (12 documents × 2 views, dim 8) and query vectors; the reference run."""
    return build_index_folder(tmp_path_factory.mktemp("props_index"))


CORPUS_CHANGES = ["none", "copy", "edit_text", "drop_line", "add_line", "rename_id", "damage"]


@pytest.mark.parametrize("kind", CORPUS_CHANGES)
@bounded(PER_KIND)
@given(texts=st.lists(PLAIN, min_size=12, max_size=12), queries=st.lists(PLAIN, min_size=5, max_size=5),
       hit=DAMAGE, pick=st.integers(0, 11))
def test_hybrid_search_uses_only_the_indexed_corpus(index_folder, kind, texts, queries, hit, pick):
    """``--hybrid bm25 --bm25_corpus``: the corpus the index records (or a byte-identical copy) fuses; any other
    file (an edited text, a line dropped or added, a renamed id, byte damage) is one line naming it."""
    from multiview_plugin.encoding.fingerprint import file_identity

    with workdir() as tmp:
        idx = tmp / "idx"
        shutil.copytree(index_folder["index"], idx)
        corpus = write_lines(tmp / "corpus.jsonl", [json.dumps({"docid": f"d{i}", "text": t})
                                                    for i, t in enumerate(texts)])
        meta = json.loads((idx / "multiview.json").read_text())
        meta["extra"]["input"] = {"identity": file_identity(corpus), "separator": " ", "source": str(corpus)}
        (idx / "multiview.json").write_text(json.dumps(meta))
        topics = write_lines(tmp / "topics.tsv", [f"q{i}\t{q}" for i, q in enumerate(queries)])
        given_corpus = tmp / "given.jsonl"
        lines = corpus.read_text().splitlines()
        if kind == "edit_text":
            lines[pick] = json.dumps({"docid": f"d{pick}", "text": texts[pick] + " edited"})
        elif kind == "drop_line":
            del lines[pick]
        elif kind == "add_line":
            lines.append(json.dumps({"docid": "d99", "text": texts[pick]}))
        elif kind == "rename_id":
            lines[pick] = json.dumps({"docid": f"x{pick}", "text": texts[pick]})
        data = ("\n".join(lines) + "\n").encode()
        given_corpus.write_bytes(damage(data, *hit) if kind == "damage" else data)
        assume(kind != "damage" or given_corpus.read_bytes() != corpus.read_bytes())
        argv = ["--index", str(idx), "--encoded_queries", str(index_folder["queries"]), "--topics", str(topics),
                "--hits", "5", "--hybrid", "bm25", "--hybrid_alpha", "0.5"]
        rc, err = run_driver(search_main, [*argv, "--bm25_corpus", str(given_corpus if kind != "none" else corpus),
                                           "--output", str(tmp / "run.trec")])
        if rc and "stop words" in err:  # every text is a stop word: BM25 has nothing to index (one line)
            assert str(given_corpus if kind != "none" else corpus) in err, err
            return
        if rc:
            assert kind not in ("none", "copy") and "--bm25_corpus" in err and str(given_corpus) in err, err
            assert not (tmp / "run.trec").exists()
            return
        assert kind in ("none", "copy"), kind
        assert run_driver(search_main, [*argv, "--bm25_corpus", str(corpus), "--output", str(tmp / "ref.trec")])[0] == 0
        assert read_run(tmp / "run.trec") == read_run(tmp / "ref.trec")
