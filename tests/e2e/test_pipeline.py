"""encode → index → search → evaluate through the drivers, on a tiny model and corpus."""

import json
import pickle

import numpy as np
import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.encode import encode_to_shard, shard_bounds
from multiview_plugin.evaluation.metrics import evaluate_run, own_metrics
from multiview_plugin.evaluation.runs import read_run
from multiview_plugin.modeling import load_encoder
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.search import MultiVectorSearcher
from tests.conftest import TOPICS, write_topics_corpus


@pytest.fixture(scope="module")
def saved_models(tiny_bert, tmp_path_factory):
    out = {}
    for name in ("mvr", "dpr"):
        torch.manual_seed(0)
        model = get_encoder_class(name).build(
            ModelArguments(model_name_or_path=str(tiny_bert), model_name=name, mvr_num_views=3),
            DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
        folder = tmp_path_factory.mktemp(name)
        model.save(folder)
        out[name] = folder
    return out


@pytest.fixture
def corpus(tmp_path):
    path = write_topics_corpus(tmp_path / "corpus.jsonl")
    queries = tmp_path / "queries.tsv"
    queries.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    return path, queries


def test_shard_bounds_are_contiguous_and_cover():
    bounds = [shard_bounds(10, 3, i) for i in range(3)]
    assert bounds == [(0, 4), (4, 7), (7, 10)]
    with pytest.raises(ValueError, match="--dataset_shard_index 3 is not in"):
        shard_bounds(10, 3, 3)


def same_ranking_modulo_ties(a: list[tuple[str, str, float]], b: list[tuple[str, str, float]], tol: float = 1e-4):
    """Two runs ((qid, docid, score) in rank order) rank alike: the same queries and scores within ``tol``, rank for
    rank; documents whose scores are within ``tol`` of each other (a tie up to float noise) may come in either
    order, and at the cut-off a tied document may be another one."""
    assert [r[0] for r in a] == [r[0] for r in b]
    np.testing.assert_allclose([r[2] for r in a], [r[2] for r in b], atol=tol, rtol=0)
    for qid in dict.fromkeys(r[0] for r in a):
        rows_a = [r for r in a if r[0] == qid]
        rows_b = [r for r in b if r[0] == qid]
        start = 0
        for end in range(1, len(rows_a) + 1):  # blocks of consecutive near-equal scores
            if end < len(rows_a) and rows_a[end - 1][2] - rows_a[end][2] <= tol:
                continue
            if end < len(rows_a):  # a block inside the list: the same documents
                assert {r[1] for r in rows_a[start:end]} == {r[1] for r in rows_b[start:end]}, (qid, start, end)
            start = end


def test_runs_compare_modulo_float_noise_ties_only():
    """The round trip below failed on faiss-cpu 1.15.1 / numpy 2.4.6: --shard_search ordered two documents with
    equal printed scores (float-noise apart) otherwise than one index. Noise-level swaps pass; a real swap does not."""
    base = [("q0", "d1", 32.0), ("q0", "d2", 31.9995), ("q0", "d3", 31.99950004), ("q0", "d4", 30.0)]
    same_ranking_modulo_ties(base, [base[0], base[2], base[1], base[3]])
    same_ranking_modulo_ties(base, [*base[:3], ("q0", "d9", 30.00001)])  # a near-tie at the cut-off
    with pytest.raises(AssertionError):
        same_ranking_modulo_ties(base, [base[1], base[0], *base[2:]])
    with pytest.raises(AssertionError):
        same_ranking_modulo_ties(base, [base[0], ("q0", "d7", 31.9995), *base[2:]])


@pytest.mark.parametrize("name", ["mvr", "dpr"])
def test_encode_index_search_round_trip(saved_models, corpus, tmp_path, name):
    corpus_path, queries = corpus
    model_dir = saved_models[name]
    emb = tmp_path / "emb"
    for shard in range(3):
        assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus_path),
                            "--dataset_number_of_shards", "3", "--dataset_shard_index", str(shard),
                            "--encode_output_path", str(emb / f"corpus.{shard}.pkl"),
                            "--per_device_eval_batch_size", "2"]) == 0
    assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(emb / "q.pkl")]) == 0
    sidecar = json.loads((emb / "corpus.0.pkl.json").read_text())
    views = 3 if name == "mvr" else 1
    assert sidecar["views_per_doc"] == views and sidecar["num_items"] == 3 and sidecar["model_name"] == name
    with open(emb / "corpus.0.pkl", "rb") as f:
        reps, lookup = pickle.load(f)
    assert reps.shape == (3 * views, 32)
    assert lookup == ([f"d{i}#{j}" for i in range(3) for j in range(3)] if name == "mvr" else ["d0", "d1", "d2"])

    # the shard holds exactly what the model computes
    model = load_encoder(model_dir).eval()
    with torch.no_grad():
        direct, _ = model.encode_passage(model.formatter.passages([f"{TOPICS[0][0]} {TOPICS[0][2]}"]))
    np.testing.assert_allclose(reps[:views], direct[0].numpy(), atol=1e-5)

    assert index_main(["--passage_reps", str(emb / "corpus.*.pkl"), "--index_dir", str(tmp_path / "idx")]) == 0
    meta = json.loads((tmp_path / "idx" / "multiview.json").read_text())
    assert meta["num_docs"] == 8 and meta["num_vectors"] == 8 * views and meta["model_name"] == name

    # Pyserini style, query text encoded on the fly == Tevatron style from encoded shards
    assert search_main(["--index", str(tmp_path / "idx"), "--topics", str(queries), "--encoder", str(model_dir),
                        "--output", str(tmp_path / "run.trec"), "--hits", "5"]) == 0
    assert search_main(["--query_reps", str(emb / "q.pkl"), "--passage_reps", str(emb / "corpus.*.pkl"),
                        "--depth", "5", "--save_ranking_to", str(tmp_path / "run.txt"), "--save_text"]) == 0
    assert search_main(["--query_reps", str(emb / "q.pkl"), "--passage_reps", str(emb / "corpus.*.pkl"),
                        "--depth", "5", "--save_ranking_to", str(tmp_path / "run_sharded.txt"), "--save_text",
                        "--shard_search"]) == 0
    trec = [line.split() for line in (tmp_path / "run.trec").read_text().splitlines()]
    tev = [line.split("\t") for line in (tmp_path / "run.txt").read_text().splitlines()]
    sharded = [line.split("\t") for line in (tmp_path / "run_sharded.txt").read_text().splitlines()]
    assert len(trec) == len(tev) == len(sharded) == 8 * 5
    # the same ranking modulo ties: two paths may compute one score with different float noise (another BLAS
    # blocking), so documents whose scores differ by less than 1e-4 may swap; exact ties are ordered by docid
    same_ranking_modulo_ties([(t[0], t[2], float(t[4])) for t in trec], [(t[0], t[1], float(t[2])) for t in tev])
    same_ranking_modulo_ties([(t[0], t[1], float(t[2])) for t in tev], [(t[0], t[1], float(t[2])) for t in sharded])

    searcher = MultiVectorSearcher(tmp_path / "idx", model_dir)
    hits = searcher.search("what is paris", k=3)
    assert len(hits) == 3 and hits[0].score >= hits[1].score

    # our TREC run evaluates identically through ir_measures and through our own metric code
    run = read_run(tmp_path / "run.trec")
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(8)}
    theirs = evaluate_run(run, qrels, ["MRR@10", "R@1", "R@5", "nDCG@10"])
    ours = own_metrics(run, qrels, ks=(1, 5, 10))
    for name in ("MRR@10", "R@1", "R@5", "nDCG@10"):
        assert theirs[name] == pytest.approx(ours[name], abs=1e-9), name


def test_encode_skips_finished_and_resumes_killed(saved_models, corpus, tmp_path, caplog):
    corpus_path, _ = corpus
    model = load_encoder(saved_models["mvr"]).eval()
    out = tmp_path / "c.pkl"
    encode_to_shard(model, str(corpus_path), out, batch_size=2)
    first = out.read_bytes()
    caplog.set_level("INFO", logger="multiview_plugin")
    encode_to_shard(model, str(corpus_path), out, batch_size=2)
    assert "is complete" in caplog.text and out.read_bytes() == first

    # a "killed" run: the model dies after 2 batches (4 docs) with a checkpoint after every batch
    class Boom(RuntimeError):
        pass

    calls = {"n": 0}
    original = model.encode_passage

    def dying(batch):
        calls["n"] += 1
        if calls["n"] > 2:
            raise Boom
        return original(batch)

    model.encode_passage = dying
    killed = tmp_path / "k.pkl"
    with pytest.raises(Boom):
        encode_to_shard(model, str(corpus_path), killed, batch_size=2, checkpoint_every=1)
    assert not killed.exists() and not (tmp_path / "k.pkl.json").exists()  # nothing reads as complete
    model.encode_passage = original
    calls["n"] = 0
    encode_to_shard(model, str(corpus_path), killed, batch_size=2)
    assert killed.read_bytes() == first  # resumed run == uninterrupted run


@pytest.mark.parametrize("lines, message", [
    (['{"docid": "a", "text": "x"}', '{"docid": "a", "text": "y"}'], "duplicate"),
    (['{"docid": "a#1", "text": "x"}'], "must not contain '#'"),
    (['{"docid": "a", "text": "   "}'], "empty text"),
])
def test_bad_corpus(saved_models, tmp_path, capsys, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rc = encode_main(["--model_name_or_path", str(saved_models["mvr"]), "--dataset_path", str(path),
                      "--encode_output_path", str(tmp_path / "o.pkl")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_search_bad_inputs(saved_models, corpus, tmp_path, capsys):
    corpus_path, queries = corpus
    emb = tmp_path / "emb"
    model = load_encoder(saved_models["mvr"]).eval()
    encode_to_shard(model, str(corpus_path), emb / "corpus.0.pkl")
    with open(emb / "wrong_q.pkl", "wb") as f:
        pickle.dump((np.ones((2, 7), dtype=np.float32), ["a", "b"]), f)
    rc = search_main(["--query_reps", str(emb / "wrong_q.pkl"), "--passage_reps", str(emb / "corpus.*.pkl"),
                      "--save_ranking_to", str(tmp_path / "r.txt")])
    assert rc == 2 and "the index expects (N, 32)" in capsys.readouterr().err
    rc = search_main(["--query_reps", str(emb / "wrong_q.pkl"), "--passage_reps", str(emb / "nothing.*.pkl"),
                      "--save_ranking_to", str(tmp_path / "r.txt")])
    assert rc == 2 and "no passage shards match" in capsys.readouterr().err
    rc = index_main(["--passage_reps", str(emb / "missing.*.pkl"), "--index_dir", str(tmp_path / "i")])
    assert rc == 2 and "no passage shards match" in capsys.readouterr().err
