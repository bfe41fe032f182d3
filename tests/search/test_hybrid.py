"""Hybrid dense + BM25 fusion (multiview_plugin.search.hybrid)."""

import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.search.hybrid import BM25Searcher, fuse_lists, fuse_runs, select_alpha
from tests.conftest import without_progress_bars

DENSE = (["d1", "d2", "d3", "d4"], [0.9, 0.8, 0.5, 0.1])
SPARSE = (["d4", "d3", "d5", "d1"], [12.0, 10.0, 9.0, 1.0])


def ids(hits):
    return [d for d, _ in hits]


def test_alpha_one_is_the_dense_order_and_alpha_zero_the_bm25_order():
    assert ids(fuse_lists(*DENSE, *SPARSE, "interpolation", 1.0))[:4] == DENSE[0]
    assert ids(fuse_lists(*DENSE, *SPARSE, "interpolation", 0.0))[:4] == SPARSE[0]


def test_the_weight_moves_the_ranking_between_the_two():
    # normalised: dense d1 1, d2 .875, d3 .5, d4 0; sparse d4 1, d3 9/11, d5 8/11, d1 0
    mid = fuse_lists(*DENSE, *SPARSE, "interpolation", 0.5)
    assert ids(mid)[0] == "d3"  # good on both sides: (0.5 + 9/11) / 2 beats either side's winner (0.5)
    assert mid[0][1] == pytest.approx((0.5 + 9 / 11) / 2)
    orders = {tuple(ids(fuse_lists(*DENSE, *SPARSE, "interpolation", a / 10))) for a in range(11)}
    assert len(orders) >= 3
    # a document missing from one list takes that list's lowest score (0 after min-max), as in Pyserini
    assert dict(fuse_lists(*DENSE, *SPARSE, "interpolation", 0.5))["d5"] == pytest.approx(0.5 * 8 / 11)
    assert dict(fuse_lists(*DENSE, *SPARSE, "interpolation", 0.5))["d2"] == pytest.approx(0.5 * 0.875)


def test_reciprocal_rank_fusion_known_example():
    fused = dict(fuse_lists(*DENSE, *SPARSE, "rrf"))
    assert fused["d1"] == pytest.approx(1 / 61 + 1 / 64)
    assert fused["d4"] == pytest.approx(1 / 64 + 1 / 61)
    assert fused["d3"] == pytest.approx(1 / 63 + 1 / 62)
    assert fused["d2"] == pytest.approx(1 / 62) and fused["d5"] == pytest.approx(1 / 63)
    # d1 and d4 tie: the dense list's order breaks it; d3 (1/63 + 1/62) just below them
    assert ids(fuse_lists(*DENSE, *SPARSE, "rrf")) == ["d1", "d4", "d3", "d2", "d5"]
    # weighted RRF: alpha 1 is the dense order, 0 the BM25 order
    assert ids(fuse_lists(*DENSE, *SPARSE, "rrf", 1.0))[:4] == DENSE[0]
    assert ids(fuse_lists(*DENSE, *SPARSE, "rrf", 0.0))[:4] == SPARSE[0]


def test_k_cuts_and_bad_settings_are_refused():
    assert len(fuse_lists(*DENSE, *SPARSE, "rrf", k=2)) == 2
    with pytest.raises(ConfigError, match="alpha"):
        fuse_lists(*DENSE, *SPARSE, "interpolation", 1.5)
    with pytest.raises(ConfigError, match="unknown fusion"):
        fuse_lists(*DENSE, *SPARSE, "sum")


def test_bm25_searcher_and_alpha_selection_on_dev():
    bm25 = BM25Searcher({"a": "red apples grow on trees", "b": "the sea is blue", "c": "blue apples are rare"})
    sparse = bm25.search(["blue sea", "red apples"], ["q1", "q2"], 3)
    assert sparse["q1"][0][0] == "b" and sparse["q2"][0][0] == "a"
    assert all(s > 0 for hits in sparse.values() for _, s in hits)  # bm25s's zero-score padding is dropped
    dense = {"q1": [("c", 0.9), ("b", 0.8), ("a", 0.1)], "q2": [("c", 0.9), ("a", 0.85), ("b", 0.1)]}
    gold = {"q1": "b", "q2": "a"}

    def top1(run):
        return sum(run[q][0][0] == d for q, d in gold.items())

    alpha, sweep = select_alpha(dense, sparse, top1, [0.0, 0.5, 1.0])
    assert [a for a, _ in sweep] == [0.0, 0.5, 1.0] and sweep[-1][1] == 0  # dense alone misses both
    assert alpha == 0.5  # ties (0 and 0.5 both get 2) go to the larger alpha
    assert ids(fuse_runs(dense, sparse, "interpolation", 1.0)["q1"]) == ["c", "b", "a"]


def test_search_driver_hybrid_flags_change_the_run(tiny_bert, tmp_path, capsys):
    from multiview_plugin.driver.search import main as search_main
    from multiview_plugin.evaluation.runs import read_run
    from multiview_plugin.pyserini import hybrid_searcher
    from multiview_plugin.search import MultiVectorSearcher
    from tests.modeling.test_dcsr import PASSAGES, build_dcsr
    from tests.search.test_explain import QUERIES, encode_and_index, write_corpus

    model_dir = tmp_path / "dcsr"
    build_dcsr(tiny_bert, passage_max_len=24).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    _, index = encode_and_index(model_dir, corpus, tmp_path)
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\t{q}\n" for i, q in enumerate(QUERIES)))
    common = ["--index", str(index), "--topics", str(topics), "--encoder", str(model_dir), "--hits", "3"]

    def run(name, *extra):
        assert search_main([*common, "--output", str(tmp_path / name), *extra]) == 0
        return {q: [d for d, _ in hits] for q, hits in read_run(tmp_path / name).items()}

    dense = run("dense.trec")
    hyb = ["--hybrid", "bm25", "--bm25_corpus", str(corpus)]
    assert run("a1.trec", *hyb, "--hybrid_alpha", "1") == dense  # alpha 1: the dense ranking
    bm25 = BM25Searcher.from_file(corpus).search(QUERIES, [f"q{i}" for i in range(len(QUERIES))], 3)
    a0 = run("a0.trec", *hyb, "--hybrid_alpha", "0")
    for q, hits in bm25.items():  # alpha 0: the BM25 ranking (its lowest hit ties with unmatched documents)
        above = [d for d, s in hits if s > hits[-1][1]] or [hits[0][0]]
        assert a0[q][:len(above)] == above
    assert a0 != dense
    rrf = run("rrf.trec", *hyb, "--hybrid_fusion", "rrf")
    assert rrf != dense or rrf != a0
    # the Pyserini-style searcher gives the driver's ranking
    s = hybrid_searcher(index, model_dir, bm25_corpus=corpus, alpha=0.0)
    assert [h.docid for h in s.batch_search(QUERIES, [f"q{i}" for i in range(len(QUERIES))], k=3)["q0"]] == a0["q0"]
    assert [h.docid for h in s.search(QUERIES[0], k=3)] == a0["q0"]
    dense_only = hybrid_searcher(index, model_dir, bm25_corpus=corpus, alpha=1.0)
    assert [h.docid for h in dense_only.search(QUERIES[2], k=3)] == \
        [h.docid for h in MultiVectorSearcher(index, model_dir).search(QUERIES[2], k=3)]
    # bad settings: one clear line each
    for extra, message in ((["--hybrid", "bm25"], "--bm25_corpus"), ([*hyb, "--hybrid_alpha", "2"], "alpha"),
                           ([*hyb, "--explain", "x.jsonl"], "--explain")):
        capsys.readouterr()
        assert search_main([*common, "--output", str(tmp_path / "bad.trec"), *extra]) == 2
        assert message in capsys.readouterr().err
    with pytest.raises(ConfigError, match="exactly one"):
        hybrid_searcher(index, model_dir)
    # main: BM25 over another corpus (other ids, or the same ids with edited texts) fused without a word
    edited = tmp_path / "edited.jsonl"
    edited.write_text(corpus.read_text().replace(PASSAGES["d0"][:10], "nothing at all"))
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text(corpus.read_text().replace('"d', '"x'))
    for other in (edited, renamed):
        capsys.readouterr()
        assert search_main([*common, "--output", str(tmp_path / "other.trec"), "--hybrid", "bm25", "--bm25_corpus",
                            str(other)]) == 2
        err = without_progress_bars(capsys.readouterr().err) + "\n"
        assert err.startswith("error: --bm25_corpus ") and "not the corpus the index was encoded from" in err, err
        assert err.count("\n") == 1 and not (tmp_path / "other.trec").exists()
        with pytest.raises(ConfigError, match="bm25_corpus= .*not the corpus"):
            hybrid_searcher(index, model_dir, bm25_corpus=other)


def test_a_list_of_equal_scores_still_counts():
    # BM25 matched one document: it gets the full sparse weight, the others none
    assert ids(fuse_lists(*DENSE, ["d3"], [2.5], "interpolation", 0.0))[0] == "d3"
    assert dict(fuse_lists(*DENSE, ["d3"], [2.5], "interpolation", 0.5))["d3"] == pytest.approx(0.5 * 0.5 + 0.5)
