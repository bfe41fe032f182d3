"""driver.mine_negatives: which index folders it can mine."""

from __future__ import annotations

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.mine_negatives import main as mine_main
from multiview_plugin.registry import get_encoder_class
from tests.conftest import write_topics_corpus, write_train_file


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
