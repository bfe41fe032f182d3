"""Tests for multiview_plugin.data.squad: the SQuAD v1.1 -> Tevatron converter (docs/data-formats.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from multiview_plugin.data.readers import (
    InputFormatError,
    iter_train_records,
    load_corpus,
    load_qrels,
    load_queries,
)
from multiview_plugin.data.squad import (
    SquadSplit,
    convert_squad,
    main,
    parse_article_range,
    random_negatives,
    write_squad_split,
)


def qa(qid: str, question: str, *answers: str) -> dict:
    return {"id": qid, "question": question, "answers": [{"answer_start": 0, "text": a} for a in answers]}


SMALL = {"version": "1.1", "data": [
    {"title": "Emperor_penguin", "paragraphs": [
        {"context": "Emperor penguins live and breed on the sea ice of Antarctica during the winter.",
         "qas": [qa("q1", "Where do emperor penguins breed?", "sea ice", "sea ice", "Antarctica "),
                 qa("q2", "Is it?", "yes")]},  # only stopwords once tokenised
        {"context": "The emperor is the tallest and heaviest of all living penguin species.",
         "qas": [qa("q3", "Which penguin species is the tallest?", "emperor")]},
    ]},
    {"title": "Paris", "paragraphs": [
        {"context": "Paris is the capital of France, on the river Seine.",
         "qas": [qa("q4", "What river flows through Paris?", "Seine")]},
    ]},
    {"title": "Zoo_(animals)", "paragraphs": [
        {"context": "Many zoos keep penguins, but emperor penguins rarely breed in captivity away from "
                    "sea ice.",
         "qas": [qa("q5", "Do zoos keep penguins?", "yes")]},
        {"context": "Zoos also keep lions, tigers and elephants.",
         "qas": [qa("q6", "What do zoos keep?", "lions")]},
    ]},
]}


@pytest.fixture
def small_squad(tmp_path) -> Path:
    path = tmp_path / "small-v1.1.json"
    path.write_text(json.dumps(SMALL))
    return path


def test_convert_small_docids_titles_and_splits(small_squad):
    split = convert_squad(small_squad, train_articles=range(1), eval_articles=range(1, 3))
    assert list(split.corpus) == ["0_0", "0_1", "1_0", "2_0", "2_1"]
    assert split.corpus["2_0"] == {"docid": "2_0", "title": "Zoo (animals)", "text": SMALL["data"][2][
        "paragraphs"][0]["context"]}
    assert split.corpus["0_1"]["title"] == "Emperor penguin"
    assert [r["query_id"] for r in split.train] == ["q1", "q2", "q3"]
    first = split.train[0]
    assert first["query"] == "Where do emperor penguins breed?"
    assert first["answers"] == ["sea ice", "Antarctica"]  # unique, order kept
    assert [p["docid"] for p in first["positive_passages"]] == ["0_0"]
    assert split.eval_queries == {"q4": "What river flows through Paris?", "q5": "Do zoos keep penguins?",
                                  "q6": "What do zoos keep?"}
    assert split.eval_qrels == {"q4": {"1_0": 1}, "q5": {"2_0": 1}, "q6": {"2_1": 1}}
    assert split.eval_answers["q4"] == ["Seine"]


def test_bm25_negative_is_lexically_closest_non_gold(small_squad):
    split = convert_squad(small_squad, train_articles=range(1), eval_articles=range(1, 3), num_negatives=2)
    by_id = {r["query_id"]: r for r in split.train}
    # gold 0_0 ranks first; the zoo paragraph (emperor penguins breed ... sea ice) is the closest other one
    assert [p["docid"] for p in by_id["q1"]["negative_passages"]] == ["2_0", "0_1"]
    # the question matches its own paragraph best, the breeding paragraph second
    assert by_id["q3"]["negative_passages"][0]["docid"] == "0_0"
    for record in split.train:
        negatives = [p["docid"] for p in record["negative_passages"]]
        assert len(negatives) == 2 == len(set(negatives))
        assert record["positive_passages"][0]["docid"] not in negatives


def test_random_negatives(small_squad):
    a = convert_squad(small_squad, range(3), range(0), num_negatives=3, negatives_from="random", seed=1)
    b = convert_squad(small_squad, range(3), range(0), num_negatives=3, negatives_from="random", seed=1)
    assert a.train == b.train and not a.eval_queries
    for record in a.train:
        negatives = [p["docid"] for p in record["negative_passages"]]
        assert len(set(negatives)) == 3 and record["positive_passages"][0]["docid"] not in negatives
    picks = random_negatives(5, np.array([0, 4, 2] * 50), 4, seed=0)
    assert all(set(row) == set(range(5)) - {g} for row, g in zip(picks.tolist(), [0, 4, 2] * 50))


@pytest.mark.parametrize("kwargs, message", [
    ({"train_articles": range(2), "eval_articles": range(1, 3)}, "overlap"),
    ({"train_articles": range(1), "eval_articles": range(1, 4)}, "out of bounds: the file has 3 articles"),
    ({"num_negatives": 5, "train_articles": range(1), "eval_articles": range(1, 3)}, "only 5 paragraphs"),
    ({"negatives_from": "dense"}, "negatives_from"),
])
def test_convert_argument_errors(small_squad, kwargs, message):
    kwargs = {"train_articles": range(1), "eval_articles": range(1, 3), **kwargs}
    with pytest.raises(ValueError, match=message):
        convert_squad(small_squad, **kwargs)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a SQuAD v1.1 json file"),
    (json.dumps([1, 2]), "not a SQuAD v1.1 json file"),
    (json.dumps({"version": "v2.0", "data": []}), "expected SQuAD v1.1"),
    (json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "c"}]}]}), r"data\[0\]\.paragraphs\[0\]"),
    (json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "x"}]}]}]}),
     r"qas\[0\]"),
])
def test_not_squad(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputFormatError, match=message) as info:
        convert_squad(path, range(0), range(0))
    assert "bad.json" in str(info.value)


def test_write_split_round_trip(small_squad, tmp_path):
    split = convert_squad(small_squad, train_articles=range(1), eval_articles=range(1, 3))
    paths = write_squad_split(split, tmp_path / "out")
    assert set(paths) == {"corpus", "train", "eval_queries", "eval_topics", "eval_qrels", "eval_answers"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths.values())
    corpus = load_corpus(paths["corpus"])
    assert list(corpus) == list(split.corpus) and corpus["2_0"].startswith("Zoo (animals) Many zoos")
    records = list(iter_train_records(paths["train"]))
    assert [r["query_id"] for r in records] == ["q1", "q2", "q3"]
    assert records[0]["positives"] == [corpus["0_0"]] and records[0]["negatives"] == [corpus["2_0"]]
    assert load_queries(paths["eval_queries"]) == split.eval_queries
    # the same queries as qid<TAB>text beside it: stock Pyserini's --topics rejects the jsonl (issue 31)
    assert paths["eval_topics"].name == "eval_queries.tsv"
    assert paths["eval_topics"].read_text().splitlines()[0] == "q4\tWhat river flows through Paris?"
    assert load_queries(paths["eval_topics"]) == split.eval_queries
    assert load_qrels(paths["eval_qrels"]) == split.eval_qrels
    assert paths["eval_qrels"].read_text().splitlines()[0] == "q4 0 1_0 1"
    answers = [json.loads(line) for line in paths["eval_answers"].read_text().splitlines()]
    assert answers[0] == {"query_id": "q4", "answers": ["Seine"]}
    # the new Tevatron format: the same records once resolved against the corpus
    new = write_squad_split(split, tmp_path / "new", train_format="new")
    assert json.loads(new["train"].read_text().splitlines()[0])["positive_document_ids"] == ["0_0"]
    assert list(iter_train_records(new["train"], corpus=corpus)) == [
        {**r, "source": r["source"].replace("out", "new")} for r in records]


def test_cli(small_squad, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["--input", str(small_squad), "--output_dir", str(out), "--train_articles", "0-0",
                 "--eval_articles", "1-2", "--num_negatives", "1"]) == 0
    assert len((out / "train.jsonl").read_text().splitlines()) == 3
    assert len((out / "eval_qrels.tsv").read_text().splitlines()) == 3
    with pytest.raises(SystemExit) as exit_info:
        main(["--input", str(small_squad), "--output_dir", str(out), "--train_articles", "0-1",
              "--eval_articles", "1-2"])
    assert exit_info.value.code == 2 and "overlap" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for flag in ("--input", "--output_dir", "--train_articles", "--eval_articles", "--num_negatives",
                 "--negatives_from", "--seed"):
        assert flag in help_text


def test_parse_article_range():
    assert parse_article_range("0-31") == range(32)
    assert parse_article_range("5") == range(5, 6)
    for bad in ("a-b", "5-2", "-1"):
        with pytest.raises(Exception, match="article range"):
            parse_article_range(bad)


def test_real_squad_dev_protocol(real_data):
    split = convert_squad(real_data / "squad" / "dev-v1.1.json")
    assert isinstance(split, SquadSplit)
    assert len(split.corpus) == 2067
    assert len(split.eval_queries) == len(split.eval_qrels) == len(split.eval_answers) == 3335
    assert len(split.train) + len(split.eval_queries) == 10570
    assert all(int(next(iter(gold)).split("_")[0]) >= 32 for gold in split.eval_qrels.values())
    for record in split.train:
        (positive,) = record["positive_passages"]
        (negative,) = record["negative_passages"]
        assert negative["docid"] != positive["docid"]
        assert int(positive["docid"].split("_")[0]) < 32
        assert record["answers"] and record["query"]


def test_the_readme_end_to_end_block_reads_what_the_converter_writes_and_writes_outside_data(small_squad, tmp_path):
    """Issue 31: the README's end-to-end block wrote converted data into $DATA, and its prose named files
    (queries.tsv, qrels.txt) that no command used. Every file it reads from the converted folder is one the
    converter writes, every file its prose names is used, and no command writes under $DATA."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The command-line pipeline", 1)[1].split("\n## ", 1)[0]
    prose, block = section.split("```bash", 1)
    block = block.split("```", 1)[0]
    written = write_squad_split(convert_squad(small_squad, train_articles=range(1), eval_articles=range(1, 3)),
                                tmp_path / "squad-tev")
    names = {p.name for p in written.values()}
    used = set(re.findall(r"data/squad-tev/([\w.]+)", block))
    assert used and used <= names, used - names
    named = {n for n in re.findall(r"`([\w]+\.(?:jsonl|tsv|txt))`", prose)}
    assert named <= used, named - used
    for flag in ("--output_dir", "--output", "--encode_output_path", "--index_dir", "--save_retrieval"):
        for value in re.findall(rf"{flag} (\S+)", block):
            assert "$DATA" not in value, (flag, value)


def test_a_gzipped_squad_file_reads_like_the_plain_one(small_squad, tmp_path):
    """The quickstart's shipped SQuAD slice is gzipped: the converter reads ``.gz`` like the other readers."""
    import gzip

    packed = tmp_path / "small-v1.1.json.gz"
    packed.write_bytes(gzip.compress(small_squad.read_bytes()))
    plain, unpacked = convert_squad(small_squad, range(1), range(1, 3)), convert_squad(packed, range(1), range(1, 3))
    assert unpacked.corpus == plain.corpus and unpacked.train == plain.train
    assert unpacked.eval_qrels == plain.eval_qrels
