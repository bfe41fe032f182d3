"""Tests of multiview_plugin/quickstart/squad_slice.py: the SQuAD v1.1 dev slice shipped for the quickstart."""

from __future__ import annotations

import gzip
import json

import pytest

from multiview_plugin.quickstart.squad_slice import (
    EVAL_TITLES,
    SLICE_PATH,
    SOURCE_SHA256,
    TRAIN_TITLES,
    convert_slice,
    main,
    make_slice,
    slice_ranges,
)


def test_the_shipped_slice_is_whole_squad_articles_with_its_license_beside_it():
    data = json.loads(gzip.decompress(SLICE_PATH.read_bytes()))
    assert data["version"] == "1.1" and [a["title"] for a in data["data"]] == [*TRAIN_TITLES, *EVAL_TITLES]
    assert SLICE_PATH.stat().st_size < 1_000_000
    license_text = SLICE_PATH.with_name("LICENSE-squad-dev-slice.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in license_text and SOURCE_SHA256 in license_text and "Rajpurkar" in license_text
    for article in data["data"]:  # the license file's table names each article with its sizes
        questions = sum(len(p["qas"]) for p in article["paragraphs"])
        assert f"| {article['title']} | {len(article['paragraphs'])} | {questions} |" in license_text


def test_the_slice_converts_to_the_protocol_with_at_least_500_held_out_questions():
    split = convert_slice()
    train, held_out = slice_ranges()
    assert (len(split.corpus), len(split.train), len(split.eval_queries)) == (277, 1169, 712)
    held_out_docs = {d for q in split.eval_qrels.values() for d in q}
    assert {int(d.split("_")[0]) for d in held_out_docs} == set(held_out)
    # no held-out question in training; training positives are the training articles' paragraphs (negatives are
    # BM25's top non-gold paragraphs of the whole corpus, as in the SQuAD-dev protocol)
    assert not {r["query_id"] for r in split.train} & set(split.eval_queries)
    assert {int(p["docid"].split("_")[0]) for r in split.train for p in r["positive_passages"]} == set(train)


def test_make_slice_refuses_another_source_and_is_byte_stable(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"data": [], "version": "1.1"}')
    with pytest.raises(ValueError, match="expected SQuAD v1.1 dev-v1.1.json"):
        make_slice(other, tmp_path / "x.json.gz")
    assert main([str(other), str(tmp_path / "x.json.gz")]) == 2
    assert "error: " in capsys.readouterr().err and not (tmp_path / "x.json.gz").exists()
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2 and "usage: python -m multiview_plugin.quickstart.squad_slice" in \
        capsys.readouterr().err


def test_make_slice_rebuilds_the_shipped_file_byte_for_byte(real_data, tmp_path):
    source = real_data / "squad" / "dev-v1.1.json"
    if not source.is_file():
        pytest.skip(f"{source} not found")
    assert make_slice(source, tmp_path / "slice.json.gz").read_bytes() == SLICE_PATH.read_bytes()
