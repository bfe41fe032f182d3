"""Explained hits: the winning view agrees with brute force, and what the view is matches what it was encoded from."""

import json

import numpy as np
import pytest
import torch

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import read_shard
from multiview_plugin.encoding.view_info import shard_views_path
from multiview_plugin.evaluation.runs import read_run
from multiview_plugin.modeling import load_encoder
from multiview_plugin.search import MultiVectorSearcher
from tests.conftest import PASSAGES, TOPICS
from tests.modeling.test_dce import build_dce
from tests.modeling.test_dcsr import build_dcsr

QUERIES = ["where is the capital", "who founded rome", "what is the small star", "the king wrote a book",
           "a red cat", "berlin germany"]


def write_corpus(path, passages):
    path.write_text("".join(json.dumps({"docid": d, "text": t}) + "\n" for d, t in passages.items()))
    return path


def encode_and_index(model_dir, corpus, tmp_path, *extra):
    shard = tmp_path / "emb" / "corpus.0.pkl"
    assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus),
                        "--encode_output_path", str(shard), "--per_device_eval_batch_size", "2",
                        "--checkpoint_every", "1", *extra]) == 0
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(tmp_path / "index")]) == 0
    return shard, tmp_path / "index"


def brute_force_views(shard, docid, q):
    reps, lookup, _ = read_shard(shard)
    rows = [i for i, x in enumerate(lookup) if x.rsplit("#", 1)[0] == docid]
    assert [lookup[i].rsplit("#", 1)[1] for i in rows] == [str(j) for j in range(len(rows))]
    return np.asarray(reps[rows], dtype=np.float32) @ q


def check_against_brute_force(searcher, shard, hits, q):
    assert hits, "no hits"
    for hit in hits:
        e = hit.explanation
        scores = brute_force_views(shard, hit.docid, q)
        assert e.view == int(np.argmax(scores)) and e.num_views == len(scores)
        assert e.view_score == pytest.approx(float(scores.max()), abs=1e-5)
        if len(scores) > 1:
            assert e.runner_up_score == pytest.approx(float(np.sort(scores)[-2]), abs=1e-5)
        else:
            assert e.runner_up_score is None


@pytest.fixture
def dcsr_index(tiny_bert, tmp_path):
    # passage_max_len 24 drops and cuts sentences of the longer passages (d0, d4)
    model_dir = tmp_path / "dcsr"
    build_dcsr(tiny_bert, passage_max_len=24).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    shard, index = encode_and_index(model_dir, corpus, tmp_path)
    return model_dir, corpus, shard, index


def test_dcsr_explanation_is_the_sentence_the_winning_vector_was_encoded_from(dcsr_index):
    model_dir, corpus, shard, index = dcsr_index
    model = load_encoder(model_dir).eval()
    fmt = model.formatter
    searcher = MultiVectorSearcher(index, model, aggregation="max")
    marker = fmt.marker_id
    for query in QUERIES:
        q = searcher.encode([query])[0]
        hits = searcher.search(query, k=len(PASSAGES), explain=True)
        assert len(hits) == len(PASSAGES)
        check_against_brute_force(searcher, shard, hits, q)
        for hit in hits:
            e, text = hit.explanation, PASSAGES[hit.docid]
            start, end = e.what["span"]
            assert e.what["sentence"] == text[start:end] and e.what["sentence_index"] == e.view
            # the tokens after the winning view's <sent> marker are this sentence (its prefix when cut short)
            batch = fmt.passages([text])
            ids = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
            where = batch["sentence_positions"][0][e.view].item()
            nxt = [i for i in range(where + 1, len(ids)) if ids[i] == marker]
            encoded = ids[where + 1: nxt[0] if nxt else len(ids) - 1]
            full = fmt.tokenizer(text[start:end], add_special_tokens=False)["input_ids"]
            assert encoded == full[:len(encoded)] and encoded
            assert e.what["cut"] == (len(encoded) < len(full))
            # and that vector is the model's state at that marker
            with torch.no_grad():
                reps, _ = model.encode_passage(batch)
            np.testing.assert_allclose(reps[0, e.view].numpy() @ q, e.view_score, atol=1e-4)
    rows = np.load(shard_views_path(shard))
    assert rows[:, 2].sum() >= 1  # the fixture does cut a sentence
    assert len(rows) == read_shard(shard)[0].shape[0]


def test_dcsr_passage_view_is_explained_as_the_passage_and_never_mined_as_a_sentence(tiny_bert, tmp_path):
    from multiview_plugin.driver.mine_negatives import main as mine_main

    model_dir = tmp_path / "dcsr-pv"
    build_dcsr(tiny_bert, passage_max_len=24, dcsr_sentence_pooling="mean", pooling="mean", normalize=True,
               dcsr_passage_view=True).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    shard, index = encode_and_index(model_dir, corpus, tmp_path)
    searcher = MultiVectorSearcher(index, model_dir, aggregation="max")
    kinds = set()
    for query in QUERIES:
        q = searcher.encode([query])[0]
        hits = searcher.search(query, k=len(PASSAGES), explain=True)
        check_against_brute_force(searcher, shard, hits, q)
        for hit in hits:
            e, text = hit.explanation, PASSAGES[hit.docid]
            is_passage = e.view == e.num_views - 1  # the passage view follows the sentences
            kinds.add(is_passage)
            assert e.what.get("passage", False) == is_passage and ("sentence" in e.what) != is_passage
            if is_passage:
                assert e.what["span"] == [0, len(text)]
    assert kinds == {True, False}  # both kinds of view win somewhere
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"query_id": f"q{i}", "query": q, "answers": [],
                                         "positive_passages": [{"docid": "d3", "text": PASSAGES["d3"]}],
                                         "negative_passages": []}) + "\n" for i, q in enumerate(QUERIES)))
    mined = tmp_path / "mined.jsonl"
    assert mine_main(["--model_name_or_path", str(model_dir), "--index", str(index), "--dataset_path", str(train),
                      "--corpus_path", str(corpus), "--output", str(mined), "--num_negatives", "4"]) == 0
    views = {d: int(n) for d, n in zip(*np.unique([x.rsplit("#", 1)[0] for x in read_shard(shard)[1]],
                                                  return_counts=True))}
    negatives = [n for line in mined.read_text().splitlines() for n in json.loads(line)["negative_passages"]]
    assert negatives and all(n.get("sentence", -1) < views[n["docid"]] - 1 for n in negatives)
    assert any("sentence" not in n for n in negatives)  # passage-view hits name no sentence


def test_hasans_hits_are_explained_by_their_best_sentence(dcsr_index):
    model_dir, _, shard, index = dcsr_index
    searcher = MultiVectorSearcher(index, model_dir)  # dcsr index: HasAns by default
    assert searcher.aggregator.name == "hasans"
    q = searcher.encode([QUERIES[0]])[0]
    check_against_brute_force(searcher, shard, searcher.search(QUERIES[0], k=3, explain=True), q)


def test_texts_come_from_a_given_corpus_and_old_indexes_still_load(dcsr_index, tmp_path):
    model_dir, corpus, shard, index = dcsr_index
    other = {d: t.upper() for d, t in PASSAGES.items()}
    searcher = MultiVectorSearcher(index, model_dir, corpus=other)
    hit = searcher.search(QUERIES[1], k=1, explain=True)[0]
    start, end = hit.explanation.what["span"]
    assert hit.explanation.what["sentence"] == other[hit.docid][start:end]
    # an index written before view information: explanations still give the view, not what it is
    meta_path = index / "multiview.json"
    meta = json.loads(meta_path.read_text())
    del meta["extra"]["view_info"]
    meta_path.write_text(json.dumps(meta))
    (index / "views.npy").unlink()
    old = MultiVectorSearcher(index, model_dir).search(QUERIES[1], k=2, explain=True)
    assert old[0].explanation.what is None and old[0].explanation.view == hit.explanation.view


def test_search_driver_writes_explanations_beside_an_unchanged_run(dcsr_index, tmp_path):
    model_dir, _, _, index = dcsr_index
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\t{q}\n" for i, q in enumerate(QUERIES)))
    common = ["--index", str(index), "--topics", str(topics), "--encoder", str(model_dir), "--hits", "3"]
    assert search_main([*common, "--output", str(tmp_path / "plain.trec")]) == 0
    assert search_main([*common, "--output", str(tmp_path / "run.trec"), "--explain", str(tmp_path / "x.jsonl")]) == 0
    assert (tmp_path / "run.trec").read_text() == (tmp_path / "plain.trec").read_text()
    run = read_run(tmp_path / "run.trec")
    lines = [json.loads(x) for x in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert {(x["qid"], x["docid"]) for x in lines} == {(q, d) for q, docs in run.items() for d, _ in docs}
    for x in lines:
        assert PASSAGES[x["docid"]][x["span"][0]:x["span"][1]] == x["sentence"]
        assert {"view", "view_score", "runner_up_score", "num_views", "rank", "score"} <= set(x)


def test_explain_needs_an_index(tmp_path, capsys):
    assert search_main(["--query_reps", "q.pkl", "--passage_reps", "p.pkl", "--save_ranking_to", "r.txt",
                        "--explain", str(tmp_path / "x.jsonl")]) == 2
    assert "--explain needs --index" in capsys.readouterr().err


def test_dce_explanation_is_the_pseudo_query_of_the_view(tiny_bert, tmp_path):
    model_dir = tmp_path / "dce"
    build_dce(tiny_bert).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", {f"d{i}": t for i, (_, _, t) in enumerate(TOPICS)})
    queries = {f"d{i}": [f"what is {a}", f"where is {b}", f"{a} {b}"][: i % 3 + 1] for i, (a, b, _) in
               enumerate(TOPICS)}
    qfile = tmp_path / "pq.jsonl"
    qfile.write_text("".join(json.dumps({"docid": d, "queries": q}) + "\n" for d, q in queries.items()))
    shard, index = encode_and_index(model_dir, corpus, tmp_path, "--pseudo_queries", str(qfile))
    model = load_encoder(model_dir).eval()
    searcher = MultiVectorSearcher(index, model)
    texts = dict((d, t) for d, t in (json.loads(x).values() for x in corpus.read_text().splitlines()))
    for query in ["what is paris", "where is the earth", "cat dog"]:
        q = searcher.encode([query])[0]
        hits = searcher.search(query, k=len(TOPICS), explain=True)
        check_against_brute_force(searcher, shard, hits, q)
        for hit in hits:
            e = hit.explanation
            assert e.what["pseudo_query"] == queries[hit.docid][e.view]
            # the winning vector is the cross-encoding of that pseudo-query with the document
            with torch.no_grad():
                rep, _ = model.encode_passage(model.formatter.passages([texts[hit.docid]], [[e.what["pseudo_query"]]]))
            assert float(rep[0, 0].numpy() @ q) == pytest.approx(e.view_score, abs=1e-4)


@pytest.mark.parametrize("method,options,key,labels", [
    ("mvr", {"mvr_num_views": 3}, "viewer", ["[VIE1]", "[VIE2]", "[VIE3]"]),
    ("mlr", {"mlr_pooling": "max", "mlr_layers": "2,1,0"}, "layer", [2, 1, 0]),
    ("mebert", {"mebert_num_vectors": 4}, "token_position", [0, 1, 2, 3]),
])
def test_fixed_views_are_labelled(tiny_bert, tmp_path, method, options, key, labels):
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class

    torch.manual_seed(0)
    model_dir = tmp_path / method
    get_encoder_class(method).build(ModelArguments(model_name_or_path=str(tiny_bert), model_name=method, **options),
                                    DataArguments(pad_to_multiple_of=None, passage_max_len=32)).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", {f"d{i}": t for i, (_, _, t) in enumerate(TOPICS)})
    shard, index = encode_and_index(model_dir, corpus, tmp_path)
    searcher = MultiVectorSearcher(index, model_dir)
    q = searcher.encode(["capital of france"])[0]
    hits = searcher.search("capital of france", k=4, explain=True)
    check_against_brute_force(searcher, shard, hits, q)
    assert all(h.explanation.what == {key: labels[h.explanation.view]} for h in hits)


# ----------------------------------------------------------------------------- analysis and report


def test_index_report_describes_the_index(dcsr_index, capsys):
    _, _, shard, index = dcsr_index
    assert index_main(["--report", str(index)]) == 0
    out = capsys.readouterr().out
    meta = json.loads((index / "multiview.json").read_text())
    counts = {}
    for line in (index / "docid").read_text().splitlines():
        counts[line.rsplit("#", 1)[0]] = counts.get(line.rsplit("#", 1)[0], 0) + 1
    hist = {n: list(counts.values()).count(n) for n in sorted(set(counts.values()))}
    assert "histogram      " + ", ".join(f"{n} views: {c}" for n, c in hist.items()) in out
    assert f"vectors          {meta['num_vectors']}" in out and "dcsr (backbone" in out
    assert f"{meta['extra']['sentences']['truncated']} cut short" in out and "IndexFlatIP" in out
    assert "shards float32" in out and "views.npy" in out


def test_sentence_spans_survive_a_killed_and_resumed_encode(tiny_bert, tmp_path):
    from multiview_plugin.encoding.encode import encode_to_shard

    build_dcsr(tiny_bert, passage_max_len=24).save(tmp_path / "dcsr")
    model = load_encoder(tmp_path / "dcsr").eval()
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    encode_to_shard(model, str(corpus), tmp_path / "a.pkl", batch_size=2)
    want = np.load(shard_views_path(tmp_path / "a.pkl"))

    class Boom(RuntimeError):
        pass

    original, calls = model.encode_passage, {"n": 0}

    def dying(batch):
        calls["n"] += 1
        if calls["n"] > 1:
            raise Boom
        return original(batch)

    model.encode_passage = dying
    with pytest.raises(Boom):
        encode_to_shard(model, str(corpus), tmp_path / "b.pkl", batch_size=2, checkpoint_every=1)
    assert not shard_views_path(tmp_path / "b.pkl").exists()
    assert (tmp_path / "b.pkl.views.partial").stat().st_size > 0  # the first batch's rows, to resume after
    model.encode_passage = original
    encode_to_shard(model, str(corpus), tmp_path / "b.pkl", batch_size=2)
    np.testing.assert_array_equal(np.load(shard_views_path(tmp_path / "b.pkl")), want)
    assert len(want) == read_shard(tmp_path / "a.pkl")[0].shape[0]


@pytest.mark.parametrize("pooling", ["mean", "independent"])
def test_sentence_spans_for_every_dcsr_pooling(tiny_bert, tmp_path, pooling):
    model_dir = tmp_path / "dcsr"
    build_dcsr(tiny_bert, passage_max_len=24, dcsr_sentence_pooling=pooling).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    shard, index = encode_and_index(model_dir, corpus, tmp_path)
    searcher = MultiVectorSearcher(index, model_dir, aggregation="max")
    fmt = searcher.encoder.formatter
    q = searcher.encode([QUERIES[0]])[0]
    hits = searcher.search(QUERIES[0], k=len(PASSAGES), explain=True)
    check_against_brute_force(searcher, shard, hits, q)
    for hit in hits:
        text, what = PASSAGES[hit.docid], hit.explanation.what
        sentences = fmt.split(text)
        kept = fmt.plan([sentences])[0]
        assert hit.explanation.num_views == len(kept)
        assert what["sentence"] == text[what["span"][0]:what["span"][1]] == sentences[hit.explanation.view]
