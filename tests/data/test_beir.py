"""Tests of multiview_plugin/data/beir.py: a BEIR folder → Tevatron train file + a carved dev set."""

from __future__ import annotations

import json

import pytest

from multiview_plugin.data.beir import convert_beir
from multiview_plugin.data.beir import main as beir_main
from multiview_plugin.data.readers import InputFormatError
from tests.conftest import TOPICS, one_line_error


@pytest.fixture
def beir_dir(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                                                 for i, (_, _, t) in enumerate(TOPICS)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"what is {a}"}) + "\n"
                                                  for i, (a, _, _) in enumerate(TOPICS)))
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                + "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    return folder


def test_train_and_dev_are_disjoint_and_every_judgment_is_kept(beir_dir, tmp_path):
    paths = convert_beir(beir_dir, tmp_path / "out", dev_size=2, num_negatives=2)
    train = [json.loads(x) for x in paths["train"].read_text().splitlines()]
    dev = [json.loads(x)["query_id"] for x in paths["eval_queries"].read_text().splitlines()]
    assert len(train) == 4 and len(dev) == 2 and not {r["query_id"] for r in train} & set(dev)
    for r in train:  # positives are the judged documents; BM25 negatives never are
        assert [p["docid"] for p in r["positive_passages"]] == [f"d{r['query_id'][1:]}"]
        assert len(r["negative_passages"]) == 2
        assert f"d{r['query_id'][1:]}" not in {n["docid"] for n in r["negative_passages"]}
    assert paths["eval_qrels"].read_text().splitlines() == [f"{q} 0 d{q[1:]} 1" for q in dev]
    assert [line.split("\t")[0] for line in paths["eval_topics"].read_text().splitlines()] == dev
    assert len(paths["corpus"].read_text().splitlines()) == len(TOPICS)
    again = convert_beir(beir_dir, tmp_path / "again", dev_size=2, num_negatives=2)  # seeded: the same carve
    assert again["eval_queries"].read_text() == paths["eval_queries"].read_text()


def test_a_dev_set_leaving_no_training_is_refused(beir_dir, tmp_path, capsys):
    with pytest.raises(InputFormatError, match="--dev_size 6 leaves no training queries \\(6 judged in train\\)"):
        convert_beir(beir_dir, tmp_path / "out", dev_size=6)
    assert beir_main(["--beir_dir", str(beir_dir), "--output_dir", str(tmp_path / "out"), "--dev_size", "9"]) == 2
    one_line_error(capsys, "--dev_size 9 leaves no training queries")
    assert not (tmp_path / "out" / "train.jsonl").exists()
