"""Never silently wrong, never a traceback: non-finite vectors and scores, ambiguous run formats, a corpus other
than the indexed one, Faiss factory / training / file errors, lone surrogates and crafted shard lookups.

Each test fails on the code before these checks (exit 0 with wrong output, or a traceback)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.readers import InputFormatError, iter_train_records, load_corpus, load_queries
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.evaluate import main as evaluate_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.mine_negatives import main as mine_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.encoding.shards import NonFiniteVectorsError, ShardFormatError, read_shard
from multiview_plugin.evaluation.runs import detect_run_format, read_run
from multiview_plugin.modeling import load_encoder
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.search import MultiVectorSearcher
from tests.conftest import TOPICS, write_topics_corpus, write_train_file


def _build(tiny_bert: Path, folder: Path, name: str = "mvr", scale: float | None = None) -> Path:
    """A tiny model; ``scale`` multiplies the last LayerNorm's weight (NaN: broken weights; 1e6: vectors past
    float16's range)."""
    torch.manual_seed(0)
    model = get_encoder_class(name).build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name=name, mvr_num_views=2),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
    if scale is not None:
        with torch.no_grad():
            norms = [p for n, p in model.named_parameters() if "LayerNorm.weight" in n]
            norms[-1].mul_(scale)
    model.save(folder)
    return folder


def _one_line_error(capsys, *needles: str) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "Traceback" not in captured.err, captured.err
    lines = [line[line.index("error: "):] for line in err.splitlines() if "error: " in line]  # after a tqdm bar
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def setup(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """An mvr model, its corpus shard, query shard and index folder."""
    root = tmp_path_factory.mktemp("silently_wrong")
    model = _build(tiny_bert, root / "mvr")
    corpus = write_topics_corpus(root / "corpus.jsonl")
    queries = root / "queries.tsv"
    queries.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    common = ["--model_name_or_path", str(model), "--per_device_eval_batch_size", "4"]
    assert encode_main([*common, "--dataset_path", str(corpus), "--encode_output_path", str(root / "c.pkl")]) == 0
    assert encode_main([*common, "--dataset_path", str(queries), "--encode_is_query",
                        "--encode_output_path", str(root / "q.pkl")]) == 0
    assert index_main(["--passage_reps", str(root / "c.pkl"), "--index_dir", str(root / "idx")]) == 0
    return {"root": root, "model": model, "corpus": corpus, "queries": queries, "shard": root / "c.pkl",
            "qshard": root / "q.pkl", "index": root / "idx"}


def _poisoned_copy(shard: Path, out: Path, row: int, value: float = np.nan) -> str:
    """A copy of ``shard`` (pickle and sidecar) with one value of ``row`` replaced; returns that row's id."""
    reps, lookup = pickle.loads(shard.read_bytes())
    reps = reps.copy()
    reps[row, 1] = value
    out.write_bytes(pickle.dumps((reps, lookup), protocol=5))
    Path(f"{out}.json").write_text(Path(f"{shard}.json").read_text())
    return lookup[row]


# --------------------------------------------------------------------------- non-finite vectors


def test_encode_refuses_nan_vectors_naming_the_docid(tiny_bert, tmp_path, capsys):
    model = _build(tiny_bert, tmp_path / "nan-model", scale=float("nan"))
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "c.pkl"
    assert encode_main(["--model_name_or_path", str(model), "--dataset_path", str(corpus),
                        "--encode_output_path", str(out)]) == 2
    _one_line_error(capsys, str(out), "non-finite vectors", "'d0'", "NaN")
    assert not out.exists() and not Path(f"{out}.json").exists()


def test_encode_refuses_vectors_that_overflow_float16(tiny_bert, tmp_path, capsys):
    """--fp16 stores float16: vectors beyond ±65504 would become inf; the error says so and names the items."""
    model = _build(tiny_bert, tmp_path / "big", name="dpr", scale=1e6)
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\twhat is paris\nq2\twhere is rome\n")
    out = tmp_path / "q.pkl"
    args = ["--model_name_or_path", str(model), "--dataset_path", str(queries), "--encode_is_query",
            "--encode_output_path", str(out)]
    assert encode_main([*args, "--fp16"]) == 2
    _one_line_error(capsys, "overflow float16", "'q1'", "without --fp16")
    assert not out.exists()
    assert encode_main(args) == 0  # float32 holds them
    assert np.isfinite(read_shard(out)[0]).all()


def test_encode_refuses_a_nan_batch_and_keeps_what_came_before(setup, tmp_path):
    """Only the batch holding the NaN item is refused; earlier flushed batches stay resumable."""
    model = load_encoder(setup["model"]).eval()
    original = type(model).encode_passage.__get__(model)
    calls = {"n": 0}

    def second_batch_nan(batch):
        calls["n"] += 1
        reps, mask = original(batch)
        if calls["n"] == 2:
            reps = reps.clone()
            reps[1] = float("nan")
        return reps, mask

    model.encode_passage = second_batch_nan
    out = tmp_path / "c.pkl"
    with pytest.raises(NonFiniteVectorsError, match=r"documents \['d3'\]"):
        encode_to_shard(model, str(setup["corpus"]), out, batch_size=2, checkpoint_every=1)
    assert not out.exists()
    model.encode_passage = original
    encode_to_shard(model, str(setup["corpus"]), out, batch_size=2)  # resumes after batch 1
    assert read_shard(out)[1] == read_shard(setup["shard"])[1]


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_index_and_search_refuse_non_finite_shard_rows(setup, tmp_path, capsys, value):
    bad = tmp_path / "c.pkl"
    row_id = _poisoned_copy(setup["shard"], bad, row=5, value=value)
    assert index_main(["--passage_reps", str(bad), "--index_dir", str(tmp_path / "idx")]) == 2
    _one_line_error(capsys, str(bad), "row 5", repr(row_id), "NaN or infinite")
    assert not (tmp_path / "idx").exists()
    run = tmp_path / "run.txt"
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(setup["qshard"]), "--passage_reps", str(bad),
                            "--save_ranking_to", str(run), "--save_text", "--depth", "3", *extra]) == 2
        _one_line_error(capsys, str(bad), repr(row_id))
    assert not run.exists()


def test_search_refuses_non_finite_query_vectors(setup, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "q.pkl"
    qid = _poisoned_copy(setup["qshard"], bad, row=2)
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(setup["index"]), "--encoded_queries", str(bad), "--output", str(run)]) == 2
    _one_line_error(capsys, str(bad), repr(qid))
    assert search_main(["--query_reps", str(bad), "--passage_reps", str(setup["shard"]),
                        "--save_ranking_to", str(run)]) == 2
    _one_line_error(capsys, str(bad), repr(qid))
    # queries encoded on the fly by a model that produces NaN for one of them
    original = MultiVectorSearcher.encode

    def nan_for_third(self, texts):
        reps = original(self, texts)
        reps[2] = np.nan
        return reps

    monkeypatch.setattr(MultiVectorSearcher, "encode", nan_for_third)
    assert search_main(["--index", str(setup["index"]), "--topics", str(setup["queries"]), "--encoder",
                        str(setup["model"]), "--output", str(run)]) == 2
    _one_line_error(capsys, str(setup["queries"]), "'q2'")
    assert not run.exists()
    # the library call refuses too (rows named)
    searcher = MultiVectorSearcher(setup["index"])
    with pytest.raises(NonFiniteVectorsError, match=r"rows \[0\]"):
        searcher.search_vectors(np.full((1, searcher.store.dim), np.nan, dtype=np.float32), 3)


# --------------------------------------------------------------------------- evaluate


@pytest.fixture
def qrels(tmp_path) -> Path:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 1\nq2 0 d2 1\n")
    return path


@pytest.mark.parametrize("line, fmt", [("q1\td1\tnan", "tevatron"), ("q1\td1\tinf", "tevatron"),
                                       ("q1 Q0 d1 1 NaN t", "trec"), ("q1 Q0 d1 1 -Infinity t", "trec")])
def test_evaluate_refuses_non_finite_scores(tmp_path, qrels, capsys, line, fmt):
    run = tmp_path / "run.txt"
    first = "q2\td2\t1.5" if fmt == "tevatron" else "q2 Q0 d2 1 1.5 t"
    run.write_text(f"{first}\n{line}\n")
    for extra in ([], ["--run_format", fmt]):
        assert evaluate_main(["--run", str(run), "--qrels", str(qrels), *extra]) == 2
        _one_line_error(capsys, f"{run} line 2", "finite number")


def test_integer_scored_three_column_run_is_not_read_as_ranks(tmp_path, qrels, capsys):
    """Tevatron-style scores that happen to be integers (3 > 2 > 1: d1 is best) were read as MS MARCO ranks
    (d1 ranked last) with exit 0; now the format must be given, and with it the ranking is right."""
    run = tmp_path / "run.txt"
    run.write_text("q1\td1\t3\nq1\td2\t2\nq1\td3\t1\n")
    assert evaluate_main(["--run", str(run), "--qrels", str(qrels), "--metrics", "MRR@10"]) == 2
    _one_line_error(capsys, str(run), "ambiguous", "--run_format")
    out = tmp_path / "m.json"
    assert evaluate_main(["--run", str(run), "--qrels", str(qrels), "--metrics", "MRR@10", "--run_format",
                          "tevatron", "--output_json", str(out)]) == 0
    assert json.loads(out.read_text())["MRR@10"] == pytest.approx(0.5)  # q1: d1 first; q2: nothing retrieved
    assert [d for d, _ in read_run(run, "tevatron")["q1"]] == ["d1", "d2", "d3"]


@pytest.mark.parametrize("text, fmt", [
    ("q1\td1\t1\nq1\td2\t2\nq2\td2\t1\n", "msmarco"),          # ranks 1..n per query: MS MARCO
    ("q1\td1\t2.5\nq1\td2\t2\nq2\td2\t1\n", "tevatron"),        # one non-integer: scores
    ("q1 Q0 d1 1 2 t\n", "trec"),
])
def test_run_format_detected_only_when_unambiguous(tmp_path, text, fmt):
    run = tmp_path / "run.txt"
    run.write_text(text)
    assert detect_run_format(run) == fmt
    assert read_run(run) == read_run(run, fmt)


@pytest.mark.parametrize("text", ["q1\td1\t2\nq1\td2\t1\n", "q1\td1\t1\nq1\td2\t1\n", "q1\td1\t1\nq1\td2\t3\n",
                                  "q1\td1\t5\n"])
def test_ambiguous_integer_runs_need_run_format(tmp_path, text):
    run = tmp_path / "run.txt"
    run.write_text(text)
    with pytest.raises(InputFormatError, match="ambiguous run format.*--run_format"):
        read_run(run)


# --------------------------------------------------------------------------- mine_negatives


def test_mine_negatives_refuses_a_corpus_other_than_the_indexed_one(setup, tmp_path, capsys):
    train = write_train_file(tmp_path / "train.jsonl", n_copies=1)
    out = tmp_path / "mined.jsonl"
    args = ["--model_name_or_path", str(setup["model"]), "--index", str(setup["index"]), "--dataset_path",
            str(train), "--output", str(out), "--num_negatives", "2", "--depth", "4"]
    other = tmp_path / "corpus.jsonl"  # same docids, other texts
    other.write_text(setup["corpus"].read_text().replace("capital", "town"))
    assert mine_main([*args, "--corpus_path", str(other)]) == 2
    _one_line_error(capsys, str(other), "not the corpus the index was encoded from", str(setup["corpus"]))
    assert not out.exists()
    assert mine_main([*args, "--corpus_path", str(setup["corpus"]), "--passage_field_separator", " | "]) == 2
    _one_line_error(capsys, "--passage_field_separator", "' | '")
    assert mine_main([*args, "--corpus_path", str(setup["corpus"])]) == 0
    texts = load_corpus(setup["corpus"])
    negatives = [n for line in out.read_text().splitlines() for n in json.loads(line)["negative_passages"]]
    assert negatives and all(n["text"] == texts[n["docid"]] for n in negatives)


def test_mine_negatives_checks_older_indexes_through_their_shards(setup, tmp_path, capsys):
    """An index folder without the recorded input (built before it was) is checked via its shards' sidecars."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(setup["index"], index)
    meta = json.loads((index / "multiview.json").read_text())
    del meta["extra"]["input"]
    (index / "multiview.json").write_text(json.dumps(meta))
    other = tmp_path / "corpus.jsonl"
    other.write_text(setup["corpus"].read_text().replace("capital", "town"))
    assert mine_main(["--model_name_or_path", str(setup["model"]), "--index", str(index), "--dataset_path",
                      str(write_train_file(tmp_path / "train.jsonl", 1)), "--corpus_path", str(other),
                      "--output", str(tmp_path / "m.jsonl")]) == 2
    _one_line_error(capsys, "not the corpus the index was encoded from")


# --------------------------------------------------------------------------- one-line errors


@pytest.mark.parametrize("factory, needle", [
    ("NotAFactory", "could not parse index string"),
    ("IVF4096,Flat", "Number of training points"),
    ("PQ5", "multiple of the number of subquantizers"),
])
def test_bad_index_factory_is_one_line(setup, tmp_path, capsys, factory, needle):
    out = tmp_path / "idx"
    assert index_main(["--passage_reps", str(setup["shard"]), "--index_dir", str(out),
                       "--index_factory", factory]) == 2
    _one_line_error(capsys, "--index_factory", repr(factory), needle)
    assert not out.exists() and not list(tmp_path.glob(".idx.*"))


def test_bad_doc_index_factory_is_one_line(setup, tmp_path, capsys):
    assert index_main(["--passage_reps", str(setup["shard"]), "--index_dir", str(tmp_path / "idx"),
                       "--doc_index_factory", "HNSWxyz"]) == 2
    _one_line_error(capsys, "--doc_index_factory", "'HNSWxyz'")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_faiss_index_file_is_one_line(setup, tmp_path, capsys, damage):
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(setup["index"], index)
    data = (index / "index").read_bytes()
    (index / "index").write_bytes({"truncate": data[:len(data) // 2], "garbage": b"not a faiss index" * 8,
                                   "empty": b""}[damage])
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(index), "--encoded_queries", str(setup["qshard"]), "--output", str(run)]) == 2
    _one_line_error(capsys, str(index / "index"), "not a readable Faiss index")
    assert index_main(["--report", str(index)]) == 2
    _one_line_error(capsys, str(index / "index"))
    assert not run.exists()


def _with_lone_surrogate(path: Path, text: str, needle: str) -> Path:
    assert needle in text
    path.write_text(text.replace(needle, needle + "\\ud800", 1))
    return path


def test_lone_surrogate_in_json_text_is_one_line(setup, tmp_path, capsys):
    corpus = _with_lone_surrogate(tmp_path / "corpus.jsonl", setup["corpus"].read_text(), "the moon")
    out = tmp_path / "c.pkl"
    assert encode_main(["--model_name_or_path", str(setup["model"]), "--dataset_path", str(corpus),
                        "--encode_output_path", str(out)]) == 2
    _one_line_error(capsys, f"{corpus} line 5", "field 'text'", "surrogate")
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"query_id": "q1", "query": "what is paris"}\n{"query_id": "q2", "query": "rome\\udc00"}\n')
    assert encode_main(["--model_name_or_path", str(setup["model"]), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(out)]) == 2
    _one_line_error(capsys, f"{queries} line 2", "field 'query'")
    train = write_train_file(tmp_path / "train.jsonl", 1)
    train = _with_lone_surrogate(train, train.read_text(), "london")
    with pytest.raises(InputFormatError, match=r"train.jsonl line 1: field 'negative_passages\[0\].title'"):
        list(iter_train_records(train))
    # a proper surrogate pair is one character, read as such
    queries.write_text('{"query_id": "q1", "query": "smile \\ud83d\\ude00"}\n')
    assert load_queries(queries) == {"q1": "smile \U0001F600"}


def _crafted(tmp_path: Path, reps: np.ndarray, lookup) -> Path:
    path = tmp_path / "crafted.pkl"
    path.write_bytes(pickle.dumps((reps, lookup), protocol=4))
    return path


def test_crafted_lookup_that_expands_is_refused_before_converting(tmp_path, capsys):
    big = "x" * 100_000
    # 1 row whose id is a list referencing one 100 KB string 1000 times: str() would make it 100 MB
    path = _crafted(tmp_path, np.zeros((1, 4), dtype=np.float32), [[big] * 1000])
    assert path.stat().st_size < 200_000
    with pytest.raises(ShardFormatError, match="lookup ids must be strings or integers, got list"):
        read_shard(path)
    # 100 000 rows sharing one 1000-character id: 100 MB of ids (and of docid file) from a < 1 MB file
    path = _crafted(tmp_path, np.zeros((100_000, 1), dtype=np.float16), ["x" * 1000] * 100_000)
    assert path.stat().st_size < 1_000_000
    with pytest.raises(ShardFormatError, match="more than its .* bytes can store"):
        read_shard(path)
    assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx"), "--allow_partial"]) == 2
    _one_line_error(capsys, str(path), "crafted")
    # a huge integer id (str() of it raises past 4300 digits), a 2-d lookup, a length mismatch, 0-dim rows
    for reps, lookup, needle in [(np.zeros((1, 4)), [10 ** 5000], "more than 18 digits"),
                                 (np.zeros((1, 4)), np.array([["a"]]), "1-d list"),
                                 (np.zeros((2, 4)), ["a"], "2 vector rows do not match 1"),
                                 (np.zeros((3, 0)), ["a", "b", "c"], "non-empty rows")]:
        with pytest.raises(ShardFormatError, match=needle):
            read_shard(_crafted(tmp_path, reps, lookup))
    # ordinary Tevatron lookups still load: strings, integers, numpy arrays of either
    for lookup in (["a", "b"], [1, 2], np.array([1, 2]), np.array(["a", "b"]), ("a", "b")):
        assert read_shard(_crafted(tmp_path, np.zeros((2, 4), dtype=np.float32), lookup))[1] == [
            str(x) for x in lookup]


def test_a_lookup_id_too_long_is_refused_before_allocating(tmp_path, capsys):
    """main: a shard whose ids include one huge string (here 2 M characters among 20 000 rows: 160 GB as a
    fixed-width docid array) was a MemoryError traceback at index time; now one line, before any allocation."""
    huge = "x" * 2_000_000
    for lookup in ([huge] + [f"d{i}" for i in range(19_999)], np.array([huge, "d1"])):  # a list, a "<U" array
        path = _crafted(tmp_path, np.zeros((len(lookup), 2), dtype=np.float16), lookup)
        with pytest.raises(ShardFormatError, match="lookup row 0: an id of 2000000 characters, longer than the 1024"):
            read_shard(path)
        assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx"), "--allow_partial"]) == 2
        _one_line_error(capsys, str(path), "2000000 characters")
    corpus = tmp_path / "corpus.jsonl"  # read from a corpus: refused at its line
    corpus.write_text(json.dumps({"docid": "y" * 5000, "text": "t"}) + "\n")
    from multiview_plugin.data.readers import InputFormatError, load_corpus

    with pytest.raises(InputFormatError, match="line 1.*of 5000 characters .* longer than the 1024"):
        load_corpus(corpus)


def test_a_weights_pickle_naming_a_forbidden_global_is_one_line(tiny_bert, tmp_path, capsys):
    """main: a model folder whose pytorch_model.bin pickle names os.system was refused by torch, but as a 40-line
    traceback; now one line naming the folder and the global (and nothing runs)."""
    import os
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_bert, folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    torch.save({"x": Evil()}, folder / "pytorch_model.bin")
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(folder), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl")]) == 2
    _one_line_error(capsys, str(folder), "system", "could run code")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "c.pkl").exists()


# ------------------------------------------------------------------------ found by tests/reliability/test_properties.py


def test_tsv_corpus_header_after_a_blank_line_is_not_a_document(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text("\nid\ttext\ttitle\nd1\tparis is big\tParis\n")
    assert load_corpus(path) == {"d1": "Paris paris is big"}


def test_tsv_quote_that_swallows_lines_is_refused(tmp_path):
    """An unbalanced quote made csv read three rows as one (two documents lost, exit 0)."""
    path = tmp_path / "psgs.tsv"
    path.write_text('d1\t"paris is big\tParis\nd2\trome\tRome\nd3\tberlin" x\tBerlin\nd4\tmoon\tMoon\n')
    with pytest.raises(InputFormatError, match=r"psgs.tsv line 1: a quoted field runs on to line 3"):
        load_corpus(path)


def test_qrels_first_line_is_a_header_only_when_it_names_columns(tmp_path):
    from multiview_plugin.data.readers import load_qrels

    path = tmp_path / "qrels.tsv"
    path.write_text("q1\td1\thigh\nq1\td2\t1\n")  # a bad first judgment was skipped as a "header"
    with pytest.raises(InputFormatError, match=r"qrels.tsv line 1: field 'relevance'"):
        load_qrels(path)
    path.write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    assert load_qrels(path) == {"q1": {"d2": 1}}
    path.write_text("q1 0 d1 1\nq1 0 d1 0\n")  # the later judgment silently won
    with pytest.raises(InputFormatError, match=r"line 2: field 'relevance'.*judged 0 here but 1"):
        load_qrels(path)
    path.write_text("q1 0 d1 1\nq1 0 d1 1\n")  # the same judgment twice is harmless
    assert load_qrels(path) == {"q1": {"d1": 1}}


def test_run_errors_are_located_not_tracebacks(tmp_path):
    run = tmp_path / "run.txt"
    run.write_text("q1\td1\t1.5\nq1\td2\thigh\n")  # was an IndexError traceback
    with pytest.raises(InputFormatError, match=r"run.txt line 2: field 'score'"):
        read_run(run, "tevatron")
    run.write_bytes(b"q1\td1\t1.5\nq1\td2\t\xff1.0\n")  # bad UTF-8: now with its line
    with pytest.raises(InputFormatError, match=r"run.txt line 2: not valid UTF-8"):
        read_run(run, "tevatron")


@pytest.mark.parametrize("bad_id", ["a b", "a\nb", "", "tab\tid", "zero\u200bwidth"])
def test_shard_ids_that_would_corrupt_line_files_are_refused(tmp_path, capsys, bad_id):
    """An id with a line end shifted every later docid line of the index by one (exit 0)."""
    path = _crafted(tmp_path, np.eye(3, 4, dtype=np.float32), ["d1", bad_id, "d3"])
    assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx"), "--allow_partial"]) == 2
    _one_line_error(capsys, str(path), "lookup row 1")
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda m: m.update(surprise=1), "unknown field 'surprise'"),
    (lambda m: m.pop("dim"), "field 'dim' is missing"),
    (lambda m: m.update(dim="8"), "field 'dim': expected an integer"),
    (lambda m: m.update(num_docs=-1), "field 'num_docs': expected a non-negative"),
    (lambda m: m.update(views_per_doc="many"), "'variable'"),
    (lambda m: m.update(extra=[]), "field 'extra': expected an object"),
    (lambda m: m.update(format_version=99), "newer than this version"),
    (lambda m: m.update(aggregation="median"), "unknown aggregation 'median'"),
    (lambda m: m.update(num_vectors=m["num_vectors"] - 1), "lines, but"),
    (lambda m: m.update(num_docs=m["num_docs"] + 1), "names 8 documents"),
    (None, "expected a JSON object"),
    ("truncate", "not valid JSON"),
])
def test_malformed_multiview_json_is_one_line(setup, tmp_path, capsys, edit, needle):
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(setup["index"], index)
    meta_path = index / "multiview.json"
    if edit == "truncate":
        meta_path.write_text(meta_path.read_text()[:40])
    else:
        meta = json.loads(meta_path.read_text())
        if edit is None:
            meta = [meta]
        else:
            edit(meta)
        meta_path.write_text(json.dumps(meta))
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(index), "--encoded_queries", str(setup["qshard"]), "--output", str(run)]) == 2
    _one_line_error(capsys, str(index), needle)
    assert not run.exists()


@pytest.mark.parametrize("change", ["blank_line", "drop_middle_line"])
def test_docid_file_shifted_against_the_index_is_refused(setup, tmp_path, capsys, change):
    """A docid file whose lines no longer match the vectors (one missing in the middle, one added at the end)
    credited vectors to the wrong documents with exit 0."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(setup["index"], index)
    lines = (index / "docid").read_text().splitlines()
    lines = [*lines[:3], "", *lines[3:-1]] if change == "blank_line" else [*lines[:3], *lines[4:], "d99#0"]
    (index / "docid").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run.trec"
    assert search_main(["--index", str(index), "--encoded_queries", str(setup["qshard"]), "--output", str(run)]) == 2
    _one_line_error(capsys, str(index / "docid"))
    assert not run.exists()


# --------------------------------------------------------------------------- shards without a sidecar


def _bare(shard: Path, out: Path) -> Path:
    """The pickle of ``shard`` without its sidecar (a plain Tevatron pickle)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shard.read_bytes())
    return out


def _warnings(caplog, path: Path) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and str(path) in r.getMessage()]


def _ranked(run: Path, fmt: str = "tevatron") -> dict[str, list[str]]:
    return {q: [d for d, _ in hits] for q, hits in read_run(run, fmt).items()}


def test_every_driver_reads_a_sidecar_less_multi_view_shard_the_same_way(setup, tmp_path, caplog):
    """main: Tevatron-style search ranked such a shard's rows as documents 'd0#1' (single-vector), while the index
    driver read the same file as multi-vector. Now each driver infers multi-vector from the docid#j lookup and
    warns, naming the file, that its model fingerprint and completeness cannot be checked."""
    caplog.set_level("WARNING", logger="multiview_plugin")
    bare = _bare(setup["shard"], tmp_path / "bare" / "c.pkl")
    tevatron = ["--query_reps", str(setup["qshard"]), "--save_text", "--depth", "3"]
    ref = tmp_path / "ref.txt"
    assert search_main([*tevatron, "--passage_reps", str(setup["shard"]), "--save_ranking_to", str(ref)]) == 0
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
    meta, ref_meta = (json.loads((i / "multiview.json").read_text()) for i in (index, setup["index"]))
    assert meta["view_ids"] is True and meta["model_fingerprint"] is None
    assert {k: meta[k] for k in ("num_docs", "num_vectors", "views_per_doc")} == \
        {k: ref_meta[k] for k in ("num_docs", "num_vectors", "views_per_doc")}
    assert (index / "docid").read_text() == (setup["index"] / "docid").read_text()
    # search over the index (encoded queries, or --encoder with explanations), analyze and mine_negatives
    caplog.clear()
    run = tmp_path / "run.pyserini"
    assert search_main(["--index", str(index), "--encoded_queries", str(setup["qshard"]), "--output", str(run),
                        "--output_format", "tevatron", "--hits", "3"]) == 0
    assert _ranked(run) == expected
    assert "no model fingerprint" in _warnings(caplog, index)[0]
    caplog.clear()
    explained = tmp_path / "explain.jsonl"
    assert search_main(["--index", str(index), "--topics", str(setup["queries"]), "--encoder", str(setup["model"]),
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
    for folder in (setup["index"], index):
        out = tmp_path / f"analysis-{folder.name}-{folder.parent.name}"
        assert analyze_main(["--index", str(folder), "--topics", str(setup["queries"]), "--qrels", str(qrels),
                             "--encoder", str(setup["model"]), "--output_dir", str(out)]) == 0
        results.append(json.loads((out / "analysis.json").read_text()))
    # what only a sidecar records (the model, its view labels and temperature) is missing; the numbers agree
    recorded = {"index", "model_name", "view_kind", "view_labels", "model_temperature",
                "local_variation_model_temperature"}
    assert {k: v for k, v in results[1].items() if k not in recorded} == \
        {k: v for k, v in results[0].items() if k not in recorded}
    assert results[1]["views_per_document"] == results[0]["views_per_document"]
    train = write_train_file(tmp_path / "train.jsonl", n_copies=1)
    mined = []
    for folder in (setup["index"], index):
        out = tmp_path / f"mined-{len(mined)}.jsonl"
        assert mine_main(["--model_name_or_path", str(setup["model"]), "--index", str(folder), "--dataset_path",
                          str(train), "--corpus_path", str(setup["corpus"]), "--output", str(out),
                          "--num_negatives", "2", "--depth", "4"]) == 0
        mined.append(out.read_text())
    assert mined[0] == mined[1]


def test_sidecar_less_query_pickle_is_searched_with_a_warning_naming_it(setup, tmp_path, caplog):
    """main: a query pickle without sidecar (of any model) was searched against fingerprinted passages and
    indexes without a word."""
    caplog.set_level("WARNING", logger="multiview_plugin")
    bare = _bare(setup["qshard"], tmp_path / "q.pkl")
    run = tmp_path / "run.txt"
    for argv in (["--index", str(setup["index"]), "--encoded_queries", str(bare), "--output", str(run)],
                 ["--query_reps", str(bare), "--passage_reps", str(setup["shard"]), "--save_ranking_to", str(run)]):
        caplog.clear()
        assert search_main(argv) == 0
        (warning,) = _warnings(caplog, bare)
        assert "fingerprint cannot be checked" in warning
        assert str(setup["index"] if "--index" in argv else setup["shard"]) in warning


def test_query_pickle_of_another_dim_is_one_line_naming_it(setup, tmp_path, capsys):
    """main: the error did not name the query file; with shards without sidecars it came only from Faiss' search."""
    q7 = tmp_path / "q7.pkl"
    q7.write_bytes(pickle.dumps((np.ones((2, 7), dtype=np.float32), ["a", "b"]), protocol=4))
    dim = json.loads((setup["index"] / "multiview.json").read_text())["dim"]
    bare = _bare(setup["shard"], tmp_path / "bare" / "c.pkl")
    run = tmp_path / "run.txt"
    assert search_main(["--index", str(setup["index"]), "--encoded_queries", str(q7), "--output", str(run)]) == 2
    _one_line_error(capsys, str(q7), "dim 7", f"(N, {dim})", str(setup["index"]))
    for passages in (setup["shard"], bare):
        for extra in ([], ["--shard_search"]):
            assert search_main(["--query_reps", str(q7), "--passage_reps", str(passages), "--save_ranking_to",
                                str(run), *extra]) == 2
            _one_line_error(capsys, str(q7), "dim 7", f"(N, {dim})")
    assert not run.exists()


@pytest.mark.parametrize("lookup, row", [(["a#0", "a#1", "b"], 2), (["a", "b#0"], 0), (["a#1", "a#2"], 0),
                                         (["a#0", "b#0", "b#2"], 2)])
def test_sidecar_less_shard_with_ambiguous_ids_is_one_line(setup, tmp_path, capsys, lookup, row):
    """main: the index driver read any '#' in the first 1000 ids as multi-vector (exit 0) while search read the same
    file as single-vector; a lookup that is neither all plain docids nor all docid#j is now refused by both."""
    dim = json.loads((setup["index"] / "multiview.json").read_text())["dim"]
    path = _crafted(tmp_path, np.eye(len(lookup), dim, dtype=np.float32), lookup)
    assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx")]) == 2
    _one_line_error(capsys, str(path), f"row {row}", repr(lookup[row]), "no sidecar")
    assert not (tmp_path / "idx").exists()
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(setup["qshard"]), "--passage_reps", str(path), "--save_ranking_to",
                            str(tmp_path / "run.txt"), *extra]) == 2
        _one_line_error(capsys, str(path), f"row {row}")


def test_sidecar_less_passage_shard_given_as_queries_is_one_line(setup, tmp_path, capsys):
    """main: a multi-vector passage pickle given as --query_reps was searched as 16 queries 'd0#0', 'd0#1', ..."""
    bare = _bare(setup["shard"], tmp_path / "c.pkl")
    run = tmp_path / "run.txt"
    assert search_main(["--query_reps", str(bare), "--passage_reps", str(setup["shard"]), "--save_ranking_to",
                        str(run)]) == 2
    _one_line_error(capsys, str(bare), "multi-vector passage shard")
    assert not run.exists()
