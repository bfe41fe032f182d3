"""driver.mine_negatives: which index folders it can mine."""

from __future__ import annotations

import json

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.readers import load_corpus
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.mine_negatives import main as mine_main
from multiview_plugin.registry import get_encoder_class
from tests.conftest import one_line_error, write_topics_corpus, write_train_file


def test_a_qdrant_index_is_refused_in_one_line(tiny_bert, tmp_path, capsys):
    """Mining reads each hit's best view from a Faiss index's rows: a Qdrant folder is a one-line error naming
    it (it was an AttributeError traceback)."""
    pytest.importorskip("qdrant_client")
    from multiview_plugin.search._qdrant import close_embedded

    model = tmp_path / "mvr"
    get_encoder_class("mvr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr",
                                                  mvr_num_views=2),
                                   DataArguments(pad_to_multiple_of=None, passage_max_len=32)).save(model)
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(model), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl")]) == 0
    try:
        assert index_main(["--passage_reps", str(tmp_path / "c.pkl"), "--index_dir", str(tmp_path / "qd"),
                           "--backend", "qdrant"]) == 0
        capsys.readouterr()
        out = tmp_path / "mined.jsonl"
        assert mine_main(["--model_name_or_path", str(model), "--index", str(tmp_path / "qd"),
                          "--dataset_path", str(write_train_file(tmp_path / "train.jsonl", n_copies=1)),
                          "--corpus_path", str(corpus), "--output", str(out)]) == 2
    finally:
        close_embedded()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "a qdrant index" in err and "needs a Faiss index" in err, err
    assert not out.exists()


def test_mine_negatives_refuses_a_corpus_other_than_the_indexed_one(mvr_index, tmp_path, capsys):
    train = write_train_file(tmp_path / "train.jsonl", n_copies=1)
    out = tmp_path / "mined.jsonl"
    args = ["--model_name_or_path", str(mvr_index["model"]), "--index", str(mvr_index["index"]), "--dataset_path",
            str(train), "--output", str(out), "--num_negatives", "2", "--depth", "4"]
    other = tmp_path / "corpus.jsonl"  # same docids, other texts
    other.write_text(mvr_index["corpus"].read_text().replace("capital", "town"))
    assert mine_main([*args, "--corpus_path", str(other)]) == 2
    one_line_error(capsys, str(other), "not the corpus the index was encoded from", str(mvr_index["corpus"]))
    assert not out.exists()
    assert mine_main([*args, "--corpus_path", str(mvr_index["corpus"]), "--passage_field_separator", " | "]) == 2
    one_line_error(capsys, "--passage_field_separator", "' | '")
    assert mine_main([*args, "--corpus_path", str(mvr_index["corpus"])]) == 0
    texts = load_corpus(mvr_index["corpus"])
    negatives = [n for line in out.read_text().splitlines() for n in json.loads(line)["negative_passages"]]
    assert negatives and all(n["text"] == texts[n["docid"]] for n in negatives)


def test_mine_negatives_checks_older_indexes_through_their_shards(mvr_index, tmp_path, capsys):
    """An index folder without the recorded input (built before it was) is checked via its shards' sidecars."""
    import shutil

    index = tmp_path / "idx"
    shutil.copytree(mvr_index["index"], index)
    meta = json.loads((index / "multiview.json").read_text())
    del meta["extra"]["input"]
    (index / "multiview.json").write_text(json.dumps(meta))
    other = tmp_path / "corpus.jsonl"
    other.write_text(mvr_index["corpus"].read_text().replace("capital", "town"))
    assert mine_main(["--model_name_or_path", str(mvr_index["model"]), "--index", str(index), "--dataset_path",
                      str(write_train_file(tmp_path / "train.jsonl", 1)), "--corpus_path", str(other),
                      "--output", str(tmp_path / "m.jsonl")]) == 2
    one_line_error(capsys, "not the corpus the index was encoded from")
