"""DCSR: sentence markers, sentence-level training data, the HasAns aggregator and the drivers end to end."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.sentence_dataset import SentenceTrainCollator, SentenceTrainDataset
from multiview_plugin.data.sentences import split_sentences
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.mine_negatives import main as mine_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.encoding.shards import read_info, read_shard
from multiview_plugin.evaluation.runs import read_run
from multiview_plugin.index.meta import IndexMeta
from multiview_plugin.modeling import load_encoder
from multiview_plugin.modeling.dcsr import SENT_MARKER
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.search import MultiVectorSearcher, build_index
from multiview_plugin.search.aggregators import HasAnsAggregator, get_aggregator, log_one_minus_softmax
from tests.conftest import PASSAGES
from tests.search.test_searcher import DIM, random_corpus, write_shards


def build_dcsr(tiny_bert, passage_max_len=64, **options):
    torch.manual_seed(0)
    return get_encoder_class("dcsr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="dcsr", **options),
        DataArguments(pad_to_multiple_of=None, passage_max_len=passage_max_len, query_max_len=16))


def record(query, answers, pos, negs, negative_sentences=None):
    return {"query_id": query, "query": query, "answers": answers, "positive_docids": [pos],
            "positives": [PASSAGES[pos]], "negative_docids": list(negs), "negatives": [PASSAGES[n] for n in negs],
            "negative_sentences": negative_sentences or [-1] * len(negs), "source": "test.jsonl:1"}


# ----------------------------------------------------------------------------- sentences and markers


def test_one_marker_per_sentence_and_each_vector_is_its_sentence(tiny_bert):
    model = build_dcsr(tiny_bert).eval()
    fmt = model.formatter
    texts = [PASSAGES["d0"], PASSAGES["d3"], PASSAGES["d4"]]
    batch = fmt.passages(texts)
    marker = fmt.tokenizer.convert_tokens_to_ids(SENT_MARKER)
    for row, text in enumerate(texts):
        sentences = split_sentences(text)
        ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        assert ids.count(marker) == len(sentences) == int(batch["sentence_mask"][row].sum())
        where = batch["sentence_positions"][row][: len(sentences)].tolist()
        assert [ids[p] for p in where] == [marker] * len(sentences)
        # the tokens after the i-th marker, up to the next marker (or [SEP]), are exactly sentence i
        bounds = [*where, len(ids) - 1]
        for i, sentence in enumerate(sentences):
            assert ids[bounds[i] + 1: bounds[i + 1]] == fmt.tokenizer(sentence, add_special_tokens=False)["input_ids"]
    # and the i-th view vector is the last-layer state at the i-th marker
    with torch.no_grad():
        reps, mask = model.encode_passage(batch)
        inputs = {k: v for k, v in batch.items() if not k.startswith("sentence_")}
        hidden = model.p_encoder(**inputs).last_hidden_state
    for row in range(len(texts)):
        n = int(mask[row].sum())
        want = hidden[row, batch["sentence_positions"][row][:n]]
        torch.testing.assert_close(reps[row, :n], want)
    assert fmt.stats == {"passages": 3, "sentences": 8, "kept": 8, "dropped": 0, "truncated": 0}


def test_sentences_past_max_len_are_dropped_and_counted(tiny_bert):
    model = build_dcsr(tiny_bert, passage_max_len=20)
    fmt = model.formatter
    sentences = split_sentences(PASSAGES["d4"])  # 4 sentences
    lengths = [len(fmt.tokenizer(s, add_special_tokens=False)["input_ids"]) for s in sentences]
    batch = fmt.passages([PASSAGES["d4"]])
    # [CLS] + markers and tokens + [SEP] fit in 20 positions: 18 for markers and tokens
    kept, used = 0, 0
    while kept < len(sentences) and used + 2 <= 18:
        used += 1 + min(lengths[kept], 18 - used - 1)
        kept += 1
    assert 0 < kept < len(sentences)
    assert int(batch["sentence_mask"].sum()) == kept
    assert batch["input_ids"].shape[1] <= 20
    assert fmt.stats["dropped"] == len(sentences) - kept
    assert fmt.stats["truncated"] == (1 if sum(1 + n for n in lengths[:kept]) > 18 else 0)


# ----------------------------------------------------------------------------- training data


def test_positive_in_passage_and_bm25_sentences(tiny_bert):
    fmt = build_dcsr(tiny_bert).formatter
    ds = SentenceTrainDataset([record("who built paris", ["river"], "d0", ["d1", "d2"])], fmt, seed=3)
    item = ds[0]
    d0 = split_sentences(PASSAGES["d0"])
    (pos_passage, pos_sentence), (ip_passage, ip_sentence), (neg_passage, neg_sentence) = item["selection"]
    assert (pos_passage, pos_sentence) == (0, 1) and "river" in d0[1]  # the answer sentence
    assert ip_passage == 0 and ip_sentence in (0, 2)  # another sentence of the positive passage
    assert neg_passage == 1 and len(item["passages"]) == 2  # one sentence of one hard-negative passage
    negative_text = [PASSAGES["d1"], PASSAGES["d2"]]
    assert len(item["passages"][1]) == len(split_sentences(next(t for t in negative_text if len(
        split_sentences(t)) == len(item["passages"][1]))))
    # sampling is deterministic in (seed, epoch, item)
    assert SentenceTrainDataset([record("who built paris", ["river"], "d0", ["d1", "d2"])], fmt, seed=3)[0] == item


def test_in_passage_stand_in_no_answer_fallback_and_skips(tiny_bert, caplog):
    fmt = build_dcsr(tiny_bert).formatter
    records = [
        record("where is berlin", ["germany"], "d3", ["d1"]),  # one-sentence positive: no in-passage negative
        record("what is the sun", [], "d4", ["d1"]),  # no answers: best lexical overlap
        record("who wrote hamlet", ["shakespeare"], "d1", ["d2"]),  # no answer sentence: skipped
    ]
    ds = SentenceTrainDataset(records, fmt, in_passage_negatives=1, bm25_negatives=1)
    assert len(ds) == 2
    assert "skipped 1 of 3 queries" in caplog.text
    first = ds[0]["selection"]
    assert first[0] == (0, 0)
    # the in-passage slot is filled from the hard-negative passage, with a different sentence than the BM25 one
    assert first[1][0] == 1 and first[2][0] == 1 and first[1][1] != first[2][1]
    assert ds[1]["selection"][0] == (0, 1)  # "the sun is a star." shares "sun"
    # Table 4's "+2 BM25" variant: two hard-negative passages, no in-passage negative
    two = SentenceTrainDataset([record("who built paris", ["river"], "d0", ["d1", "d2"])], fmt,
                               in_passage_negatives=0, bm25_negatives=2)[0]
    assert [p for p, _ in two["selection"]] == [0, 1, 2]
    # a mined sentence index picks that sentence
    mined = SentenceTrainDataset([record("who built paris", ["river"], "d0", ["d4"], [2])], fmt,
                                 in_passage_negatives=0)[0]
    assert mined["selection"][1] == (1, 2)


def test_sentence_loss_uses_the_selected_sentences(tiny_bert):
    model = build_dcsr(tiny_bert, normalize=True, temperature=0.5).train()
    fmt = model.formatter
    records = [record("who built paris", ["river"], "d0", ["d1"]), record("where is rome", ["italy"], "d2", ["d4"])]
    ds = SentenceTrainDataset(records, fmt)
    batch = SentenceTrainCollator(fmt)([ds[0], ds[1]])
    assert batch["sentence_selection"].shape == (2, 3, 2)
    assert batch["sentence_selection"][1, 0, 0] == 2  # query 1's positive passage is the third row
    torch.manual_seed(0)
    out = model(**batch)
    model.eval()  # no dropout: recompute by hand
    torch.manual_seed(0)
    model.train()
    q = model.encode_query(batch["query"])
    reps, _ = model.encode_passage(batch["passage"])
    sel = batch["sentence_selection"].reshape(-1, 2)
    cands = reps[sel[:, 0], sel[:, 1]]
    want = F.cross_entropy(q @ cands.T / 0.5, torch.tensor([0, 3]))
    torch.testing.assert_close(out.loss, want, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- HasAns


def test_hasans_equals_hand_computation():
    scores = np.array([[3.0, 2.0, 1.5, 1.0, 0.5]], dtype=np.float32)
    docs = np.array([[7, 2, 7, 5, 2]])
    p = np.exp(scores[0].astype(np.float64)) / np.exp(scores[0].astype(np.float64)).sum()
    has = {7: 1 - (1 - p[0]) * (1 - p[2]), 2: 1 - (1 - p[1]) * (1 - p[4]), 5: p[3]}
    doc, score, found = HasAnsAggregator().aggregate(scores, docs, 4)
    ranked = sorted(has, key=has.get, reverse=True)
    assert doc[0, :3].tolist() == ranked and doc[0, 3] == -1 and found.tolist() == [3]
    np.testing.assert_allclose(score[0, :3], [has[d] for d in ranked], rtol=1e-6)
    # a temperature rescales the scores before the softmax
    doc_t, score_t, _ = HasAnsAggregator(temperature=0.5).aggregate(scores, docs, 3)
    p2 = np.exp(2 * scores[0].astype(np.float64))
    p2 /= p2.sum()
    assert score_t[0, 0] == pytest.approx(max(1 - (1 - p2[0]) * (1 - p2[2]), 1 - (1 - p2[1]) * (1 - p2[4]), p2[3]),
                                          rel=1e-6)


def test_hasans_is_stable_in_log_space():
    # one dominant sentence: 1 - p is ~1e-17, which float arithmetic on p rounds to 0
    scores = np.array([[100.0] + [60.0] * 50], dtype=np.float64)
    valid = np.ones_like(scores, dtype=bool)
    log1m = log_one_minus_softmax(scores, valid)
    want_top = np.log(50 * np.exp(-40.0)) - np.log1p(50 * np.exp(-40.0))
    assert np.isfinite(log1m[0, 0]) and log1m[0, 0] == pytest.approx(want_top, rel=1e-12)
    naive_p = np.exp(scores[0] - scores[0].max()) / np.exp(scores[0] - scores[0].max()).sum()
    assert 1 - naive_p[0] == 0.0  # what a direct product would have used
    # thousands of sentences in one passage: the sum of logs matches a long-double product
    rng = np.random.default_rng(0)
    many = np.sort(rng.standard_normal((1, 5000)))[:, ::-1].copy()
    docs = np.zeros_like(many, dtype=np.int64)
    docs[0, ::2] = 1  # two passages with 2,500 sentences each
    doc, score, _ = HasAnsAggregator().aggregate(many, docs, 2)
    p = np.exp(many[0].astype(np.longdouble))
    p /= p.sum()
    want = {d: 1 - np.prod(1 - p[docs[0] == d]) for d in (0, 1)}
    assert doc[0].tolist() == sorted(want, key=want.get, reverse=True)
    np.testing.assert_allclose(score[0], [float(want[d]) for d in doc[0]], rtol=1e-5)
    # padding (-1, nothing fetched) contributes nothing
    padded, pscore, found = HasAnsAggregator().aggregate(np.array([[1.0, 0.0, -np.inf]]), np.array([[4, 4, -1]]), 2)
    p_one = np.e / (np.e + 1)  # the two valid entries: p = e/(e+1) and 1/(e+1), both of passage 4
    assert padded.tolist() == [[4, -1]] and found.tolist() == [1]
    assert pscore[0, 0] == pytest.approx(1 - (1 - p_one) * p_one, rel=1e-6)


def test_hasans_search_matches_brute_force_over_the_fetched_sentences(tmp_path):
    rng = np.random.default_rng(1)
    docids, reps, mask = random_corpus(rng, 200, (1, 6))
    build_index(write_shards(tmp_path, docids, reps, mask, 2), tmp_path / "idx", aggregation="hasans")
    searcher = MultiVectorSearcher(tmp_path / "idx", aggregation_options={"fetch_docs": 20, "temperature": 0.7})
    assert searcher.aggregator.name == "hasans" and searcher.aggregator.temperature == 0.7
    q = rng.standard_normal((6, DIM)).astype(np.float32)
    ids, scores = searcher.search_vectors(q, 10)
    flat = reps[mask]
    owner = np.repeat(np.arange(len(docids)), mask.sum(1))
    fetch = int(np.ceil(20 * mask.sum() / len(docids)))
    for qi in range(len(q)):
        s = flat @ q[qi]
        top = np.argsort(-s)[:fetch]
        p = np.exp((s[top] - s[top].max()) / 0.7)
        p /= p.sum()
        has = {}
        for row, pr in zip(top, p):
            has[owner[row]] = has.get(owner[row], 1.0) * (1 - pr)
        ranked = sorted(has, key=lambda d: has[d])[:10]
        assert ids[qi].tolist() == [docids[d] for d in ranked]
        np.testing.assert_allclose(scores[qi], [1 - has[d] for d in ranked], rtol=1e-4)
    # max aggregation over the same variable-view index is still exact
    max_ids, _ = MultiVectorSearcher(tmp_path / "idx", aggregation="max").search_vectors(q, 10)
    brute = np.where(mask[None], np.einsum("qd,nkd->qnk", q, reps), -np.inf).max(-1)
    assert max_ids.tolist() == [[docids[i] for i in row] for row in np.argsort(-brute, axis=1)[:, :10]]
    with pytest.raises(ValueError, match="unknown aggregation"):
        get_aggregator("mean")


# ----------------------------------------------------------------------------- drivers end to end


def test_dcsr_train_encode_index_search_mine(tiny_bert, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"docid": d, "text": t}) + "\n" for d, t in PASSAGES.items()))
    train = tmp_path / "train.jsonl"
    rows = [("who built paris", ["river"], "d0", "d1"), ("what did the king write", ["play"], "d1", "d2"),
            ("who founded rome", ["king"], "d2", "d0"), ("what is the sun", ["star"], "d4", "d3")]
    train.write_text("".join(json.dumps({
        "query_id": f"q{i}", "query": q, "answers": a,
        "positive_passages": [{"docid": p, "text": PASSAGES[p]}],
        "negative_passages": [{"docid": n, "text": PASSAGES[n]}]}) + "\n" for i, (q, a, p, n) in enumerate(rows)))
    model_dir = tmp_path / "model"
    assert train_main(["--model_name", "dcsr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train),
                       "--output_dir", str(model_dir), "--max_steps", "3", "--per_device_train_batch_size", "2",
                       "--passage_max_len", "48", "--query_max_len", "16", "--normalize", "--temperature", "0.1",
                       "--learning_rate", "1e-3", "--report_to", "none", "--save_strategy", "no",
                       "--dataloader_num_workers", "0", "--use_cpu"]) == 0
    model = load_encoder(model_dir)
    assert model.config.model_name == "dcsr" and model.config.options["dcsr_bm25_negatives"] == 1
    shard = tmp_path / "emb" / "corpus.0.pkl"
    assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus),
                        "--encode_output_path", str(shard)]) == 0
    reps, lookup, info = read_shard(shard)
    counts = [len(split_sentences(t)) for t in PASSAGES.values()]
    assert len(lookup) == sum(counts) and lookup[:3] == ["d0#0", "d0#1", "d0#2"]
    assert info.views_per_doc == "variable" and info.extra["temperature"] == pytest.approx(0.1)
    assert info.extra["sentences"] == {"passages": 5, "sentences": sum(counts), "kept": sum(counts), "dropped": 0,
                                       "truncated": 0}
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(tmp_path / "idx")]) == 0
    meta = IndexMeta.load(tmp_path / "idx")
    assert meta.aggregation == "hasans" and meta.mean_views == pytest.approx(sum(counts) / 5)
    assert meta.extra["sentences"]["sentences"] == sum(counts)
    queries = tmp_path / "queries.tsv"
    queries.write_text("".join(f"q{i}\t{q}\n" for i, (q, *_) in enumerate(rows)))
    for aggregation in ("hasans", "max"):
        run = tmp_path / f"{aggregation}.trec"
        assert search_main(["--index", str(tmp_path / "idx"), "--topics", str(queries), "--encoder", str(model_dir),
                            "--output", str(run), "--hits", "5", "--aggregation", aggregation]) == 0
        ranked = read_run(run)
        assert len(ranked) == 4 and all(len(hits) == 5 for hits in ranked.values())
        if aggregation == "hasans":  # probabilities, ranked
            scores = [s for _, s in ranked["q0"]]
            assert all(0 <= s <= 1 for s in scores) and scores == sorted(scores, reverse=True)
    # Tevatron style over the shards defaults to the model's aggregation; shard-by-shard refuses HasAns
    q_shard = tmp_path / "emb" / "queries.pkl"
    assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(queries), "--encode_is_query",
                        "--encode_output_path", str(q_shard)]) == 0
    assert read_info(q_shard).extra == {}
    tev = tmp_path / "tev.txt"
    assert search_main(["--query_reps", str(q_shard), "--passage_reps", str(shard), "--depth", "5",
                        "--save_ranking_to", str(tev), "--save_text"]) == 0
    by_index = [d for d, _ in read_run(tmp_path / "hasans.trec")["q0"]]
    assert [d for d, _ in read_run(tev, fmt="tevatron")["q0"]] == by_index
    assert search_main(["--query_reps", str(q_shard), "--passage_reps", str(shard), "--depth", "5",
                        "--save_ranking_to", str(tev), "--shard_search"]) == 2
    # sentence-level hard negatives from the trained checkpoint
    mined = tmp_path / "train.hard.jsonl"
    assert mine_main(["--model_name_or_path", str(model_dir), "--index", str(tmp_path / "idx"), "--dataset_path",
                      str(train), "--corpus_path", str(corpus), "--output", str(mined), "--num_negatives", "2"]) == 0
    lines = [json.loads(x) for x in mined.read_text().splitlines()]
    assert len(lines) == 4
    for line, (_, answers, pos, _) in zip(lines, rows):
        negs = line["negative_passages"]
        assert len(negs) == 2 and all(n["docid"] != pos for n in negs)
        assert all(0 <= n["sentence"] < len(split_sentences(n["text"])) for n in negs)
        assert not any(answers[0] in n["text"].split() for n in negs)
    # the mined file trains again (its sentences are used as the hard-negative sentences)
    assert train_main(["--model_name", "dcsr", "--model_name_or_path", str(model_dir), "--dataset_path", str(mined),
                       "--output_dir", str(tmp_path / "model2"), "--max_steps", "1", "--per_device_train_batch_size",
                       "2", "--report_to", "none", "--save_strategy", "no", "--dataloader_num_workers", "0",
                       "--use_cpu"]) == 0
