"""DCE: pseudo-query generation and files, (q, q+d) training inputs, variable views, and the CLI end to end."""

import json

import pytest
import torch
import torch.nn.functional as F

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.evaluate import main as evaluate_main
from multiview_plugin.driver.generate_queries import main as generate_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.encoding.shards import read_shard
from multiview_plugin.modeling.dce import QueryPairCollator
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS, write_topics_corpus


@pytest.fixture
def corpus(tmp_path):
    return write_topics_corpus(tmp_path / "corpus.jsonl")


def build_dce(tiny_bert, **kw):
    torch.manual_seed(0)
    return get_encoder_class("dce").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="dce", **kw),
        DataArguments(pad_to_multiple_of=None, query_max_len=8, passage_max_len=24))


def generate(model, corpus, out, *extra):
    return generate_main(["--model_name_or_path", str(model), "--corpus_path", str(corpus), "--output", str(out),
                          "--num_queries", "3", "--max_query_length", "5", "--batch_size", "3", *extra])


# ----------------------------------------------------------------------------- model


def test_training_inputs_pair_each_passage_with_its_own_query(tiny_bert):
    model = build_dce(tiny_bert, normalize=True, temperature=0.5)
    fmt = model.formatter
    features = [{"query": "where is paris", "passages": [TOPICS[0][2], TOPICS[1][2]]},
                {"query": "what is the moon", "passages": [TOPICS[4][2], TOPICS[5][2]]}]
    batch = QueryPairCollator(fmt)(features)
    tok = fmt.tokenizer
    assert batch["passage"]["view_counts"].tolist() == [1, 1, 1, 1]
    for row, (query, text) in enumerate([(f["query"], p) for f in features for p in f["passages"]]):
        ids = batch["passage"]["input_ids"][row][batch["passage"]["attention_mask"][row].bool()].tolist()
        q = tok(query, add_special_tokens=False)["input_ids"][:8 - 2]
        d = tok(text, add_special_tokens=False)["input_ids"][:24 - 1]
        assert ids == [tok.cls_token_id, *q, tok.sep_token_id, *d, tok.sep_token_id]
        types = batch["passage"]["token_type_ids"][row][: len(ids)].tolist()
        assert types == [0] * (len(q) + 2) + [1] * (len(d) + 1)
    # the loss scores every query against every (q' + d') of the batch: other queries' pairs are negatives.
    # Same seed, same dropout draws: the forward pass and the hand computation see identical vectors.
    model.train()
    torch.manual_seed(0)
    out = model(**batch)
    torch.manual_seed(0)
    q = model.encode_query(batch["query"])
    reps, mask = model.encode_passage(batch["passage"])
    assert reps.shape[:2] == (4, 1) and mask.all()
    want = F.cross_entropy(q @ reps[:, 0].T / 0.5, torch.tensor([0, 2]))
    torch.testing.assert_close(out.loss, want)
    model.eval()
    with torch.no_grad():
        reps, _ = model.encode_passage(batch["passage"])
    # pairing matters: the same passages with swapped queries give other vectors
    swapped = QueryPairCollator(fmt)([{**features[0], "query": features[1]["query"]}, features[1]])
    with torch.no_grad():
        other, _ = model.encode_passage(swapped["passage"])
    assert not torch.allclose(other[0], reps[0])


def test_views_equal_pseudo_query_counts(tiny_bert, corpus, tmp_path):
    model_dir = tmp_path / "dce"
    build_dce(tiny_bert).save(model_dir)
    queries = tmp_path / "q.jsonl"
    counts = [i % 4 for i in range(len(TOPICS))]  # 0..3 queries per document
    queries.write_text("".join(json.dumps({"docid": f"d{i}", "queries": [f"what is {TOPICS[i][0]} {j}"
                                                                           for j in range(c)]}) + "\n"
                               for i, c in enumerate(counts)))
    shard = tmp_path / "emb.pkl"
    assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus),
                        "--encode_output_path", str(shard), "--pseudo_queries", str(queries),
                        "--per_device_eval_batch_size", "3"]) == 0
    reps, lookup, info = read_shard(shard)
    got = [sum(1 for x in lookup if x.split("#")[0] == f"d{i}") for i in range(len(TOPICS))]
    assert got == [max(c, 1) for c in counts]  # a document without queries is encoded once, alone
    assert info.views_per_doc == "variable" and reps.shape[0] == sum(got)


def test_encoding_without_queries_fails_clearly(tiny_bert, corpus, tmp_path, capsys):
    model_dir = tmp_path / "dce"
    build_dce(tiny_bert).save(model_dir)
    assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "x.pkl")]) == 2
    assert "pass --pseudo_queries" in capsys.readouterr().err


# ----------------------------------------------------------------------------- end to end


def test_generate_warmup_finetune_encode_search_evaluate(tiny_doc2query, tiny_bert, corpus, tmp_path):
    queries = tmp_path / "pseudo.jsonl"
    assert generate(tiny_doc2query, corpus, queries) == 0
    common = ["--model_name", "dce", "--query_max_len", "8", "--passage_max_len", "24", "--report_to", "none",
              "--save_strategy", "no", "--dataloader_num_workers", "0", "--use_cpu", "--max_steps", "2",
              "--per_device_train_batch_size", "4", "--learning_rate", "1e-3"]
    warm = tmp_path / "warm"
    assert train_main([*common, "--model_name_or_path", str(tiny_bert), "--pseudo_queries_path", str(queries),
                       "--corpus_path", str(corpus), "--output_dir", str(warm)]) == 0
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({
        "query_id": f"t{i}", "query": f"what is {a}", "answers": [a],
        "positive_passages": [{"docid": f"d{i}", "title": a, "text": t}],
        "negative_passages": [{"docid": f"d{(i + 1) % 8}", "title": TOPICS[(i + 1) % 8][0],
                               "text": TOPICS[(i + 1) % 8][2]}]}) + "\n" for i, (a, _, t) in enumerate(TOPICS)))
    tuned = tmp_path / "tuned"
    assert train_main([*common, "--model_name_or_path", str(warm), "--dataset_path", str(train),
                       "--train_group_size", "2", "--output_dir", str(tuned)]) == 0
    shard = tmp_path / "emb" / "corpus.0.pkl"
    assert encode_main(["--model_name_or_path", str(tuned), "--dataset_path", str(corpus), "--encode_output_path",
                        str(shard), "--pseudo_queries", str(queries)]) == 0
    assert read_shard(shard)[0].shape[0] == 3 * len(TOPICS)
    assert index_main(["--passage_reps", str(shard), "--index_dir", str(tmp_path / "idx")]) == 0
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(tmp_path / "idx"), "--topics", str(topics), "--encoder", str(tuned),
                        "--output", str(run), "--hits", "5"]) == 0
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{i} 0 d{i} 1\n" for i in range(len(TOPICS))))
    out = tmp_path / "metrics.json"
    assert evaluate_main(["--run", str(run), "--qrels", str(qrels), "--metrics", "R@5",
                          "--output_json", str(out)]) == 0
    assert 0.0 <= json.loads(out.read_text())["R@5"] <= 1.0


def test_dev_selection_encodes_the_dev_corpus_with_its_pseudo_queries(tiny_bert, corpus, tmp_path, capsys):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({
        "query_id": f"t{i}", "query": f"what is {a}",
        "positive_passages": [{"docid": f"d{i}", "title": a, "text": t}],
        "negative_passages": [{"docid": f"d{(i + 1) % 8}", "title": TOPICS[(i + 1) % 8][0],
                               "text": TOPICS[(i + 1) % 8][2]}]}) + "\n" for i, (a, _, t) in enumerate(TOPICS)))
    queries = tmp_path / "dev.tsv"
    queries.write_text("a\twhat is paris\nb\twhat is the moon\n")
    qrels = tmp_path / "dev_qrels.txt"
    qrels.write_text("a 0 d0 1\nb 0 d4 1\n")
    views = tmp_path / "dev_views.jsonl"
    views.write_text("".join(json.dumps({"docid": f"d{i}", "queries": [f"what is {a}", f"where is {b}"]}) + "\n"
                             for i, (a, b, _) in enumerate(TOPICS)))
    dev = ["--dev_queries", str(queries), "--dev_qrels", str(qrels), "--dev_corpus", str(corpus),
           "--dev_eval_steps", "1"]
    common = ["--query_max_len", "8", "--passage_max_len", "24", "--report_to", "none", "--save_strategy", "no",
              "--dataloader_num_workers", "0", "--use_cpu", "--max_steps", "2", "--per_device_train_batch_size",
              "4", "--train_group_size", "2", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train)]
    out = tmp_path / "dce"
    assert train_main(["--model_name", "dce", *common, "--output_dir", str(out), *dev,
                       "--dev_pseudo_queries", str(views)]) == 0
    curve = json.loads((out / "dev_curve.json").read_text())
    assert [p["step"] for p in curve["curve"]] == [0, 1, 2] and (out / "best" / "multiview_config.json").is_file()
    # dce without the dev corpus's views, or views for a model that has none: one-line errors before training
    assert train_main(["--model_name", "dce", *common, "--output_dir", str(tmp_path / "x"), *dev]) == 2
    assert "needs --dev_pseudo_queries" in capsys.readouterr().err
    assert train_main(["--model_name", "dpr", *common, "--output_dir", str(tmp_path / "y"), *dev,
                       "--dev_pseudo_queries", str(views)]) == 2
    assert "does not encode documents with pseudo-queries" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())
