"""Shard sets (encoding/shard_sets.py): shards searched or indexed together are one complete set of one model;
the search and index drivers' one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import read_shard


def _encode_shards(model_dir: Path, corpus: Path, emb: Path, num_shards: int) -> None:
    for i in range(num_shards):
        assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus),
                            "--dataset_number_of_shards", str(num_shards), "--dataset_shard_index", str(i),
                            "--encode_output_path", str(emb / f"corpus.{i}.pkl")]) == 0


def test_missing_middle_shard_is_refused_unless_allow_partial(models, corpus, queries, tmp_path, capsys):
    emb = tmp_path / "emb"
    _encode_shards(models["mvr"], corpus, emb, 3)
    assert encode_main(["--model_name_or_path", str(models["mvr"]), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(tmp_path / "q.pkl")]) == 0
    (emb / "corpus.1.pkl").unlink()
    reps = str(emb / "corpus.*.pkl")
    search = ["--query_reps", str(tmp_path / "q.pkl"), "--passage_reps", reps, "--depth", "8",
              "--save_ranking_to", str(tmp_path / "run.txt"), "--save_text"]
    for argv, main in [(["--passage_reps", reps, "--index_dir", str(tmp_path / "idx")], index_main),
                       (search, search_main), ([*search, "--shard_search"], search_main)]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "shard(s) 1 of 3" in err and "missing" in err and "--allow_partial" in err, err
        assert main([*argv, "--allow_partial"]) == 0
    assert json.loads((tmp_path / "idx" / "multiview.json").read_text())["num_docs"] == 5
    run = (tmp_path / "run.txt").read_text().splitlines()
    assert len({line.split("\t")[1] for line in run}) == 5


def test_shards_or_queries_of_another_model_are_refused(models, corpus, queries, tmp_path, capsys):
    emb = tmp_path / "emb"
    _encode_shards(models["mvr"], corpus, emb, 2)
    assert encode_main(["--model_name_or_path", str(models["mvr_other"]), "--dataset_path", str(corpus),
                        "--dataset_number_of_shards", "2", "--dataset_shard_index", "1",
                        "--encode_output_path", str(emb / "corpus.1.pkl"), "--overwrite"]) == 0
    assert index_main(["--passage_reps", str(emb / "corpus.*.pkl"), "--index_dir", str(tmp_path / "idx"),
                       "--allow_partial"]) == 2
    assert "made by another model" in capsys.readouterr().err
    _encode_shards(models["mvr"], corpus, tmp_path / "good", 2)
    assert index_main(["--passage_reps", str(tmp_path / "good" / "corpus.*.pkl"),
                       "--index_dir", str(tmp_path / "idx")]) == 0
    assert encode_main(["--model_name_or_path", str(models["mvr_other"]), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(tmp_path / "q.pkl")]) == 0
    run = ["--output", str(tmp_path / "run.trec")]
    assert search_main(["--index", str(tmp_path / "idx"), "--encoded_queries", str(tmp_path / "q.pkl"), *run]) == 2
    assert "made by another model" in capsys.readouterr().err
    assert search_main(["--index", str(tmp_path / "idx"), "--topics", str(queries),
                        "--encoder", str(models["mvr_other"]), *run]) == 2
    assert "model_weights" in capsys.readouterr().err
    assert search_main(["--query_reps", str(tmp_path / "q.pkl"), "--passage_reps",
                        str(tmp_path / "good" / "corpus.*.pkl"), "--save_ranking_to", str(tmp_path / "r.txt")]) == 2
    assert "made by another model" in capsys.readouterr().err
    assert search_main(["--index", str(tmp_path / "idx"), "--topics", str(queries),
                        "--encoder", str(models["mvr"]), *run]) == 0


def test_more_shards_than_documents(models, corpus, queries, tmp_path):
    """Shards past the end are empty but valid: index and search use the others."""
    corpus.write_text("".join(corpus.read_text().splitlines(keepends=True)[:3]))
    emb = tmp_path / "emb"
    _encode_shards(models["mvr"], corpus, emb, 5)
    assert json.loads((emb / "corpus.4.pkl.json").read_text())["num_items"] == 0
    assert read_shard(emb / "corpus.4.pkl")[0].shape[0] == 0
    assert index_main(["--passage_reps", str(emb / "corpus.*.pkl"), "--index_dir", str(tmp_path / "idx")]) == 0
    assert json.loads((tmp_path / "idx" / "multiview.json").read_text())["num_docs"] == 3
    assert encode_main(["--model_name_or_path", str(models["mvr"]), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(tmp_path / "q.pkl")]) == 0
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(tmp_path / "q.pkl"), "--passage_reps", str(emb / "corpus.*.pkl"),
                            "--depth", "2", "--save_ranking_to", str(tmp_path / "r.txt"), "--save_text", *extra]) == 0
        assert len((tmp_path / "r.txt").read_text().splitlines()) == 8 * 2


def test_hits_depth_topics_and_disk_errors_are_one_line(models, corpus, queries, tmp_path, capsys, monkeypatch):
    emb = tmp_path / "emb"
    _encode_shards(models["dpr"], corpus, emb, 1)
    assert index_main(["--passage_reps", str(emb / "*.pkl"), "--index_dir", str(tmp_path / "idx")]) == 0
    pyserini = ["--index", str(tmp_path / "idx"), "--encoder", str(models["dpr"]), "--output", str(tmp_path / "r")]
    for hits in ("0", "-1"):
        assert search_main([*pyserini, "--topics", str(queries), "--hits", hits]) == 2
        assert f"--hits must be a positive number of documents per query, got {hits}" in capsys.readouterr().err
    assert search_main(["--query_reps", str(emb / "corpus.0.pkl"), "--passage_reps", str(emb / "*.pkl"),
                        "--depth", "0", "--save_ranking_to", str(tmp_path / "r")]) == 2
    assert "--depth must be a positive" in capsys.readouterr().err
    latin1 = tmp_path / "topics.tsv"
    latin1.write_bytes("q1\twhat is caf\xe9\n".encode("latin-1"))
    assert search_main([*pyserini, "--topics", str(latin1)]) == 2
    err = capsys.readouterr().err
    assert "topics.tsv line 1: not valid UTF-8" in err and "Traceback" not in err
    # a folder that cannot be created (read-only, or a file in the way)
    (tmp_path / "file").write_text("")
    assert index_main(["--passage_reps", str(emb / "*.pkl"), "--index_dir", str(tmp_path / "file" / "idx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "file") in err and len(err.strip().splitlines()) == 1
    # a full disk while encoding: the failed write names the file
    import errno

    import multiview_plugin.encoding.shards as shards

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shards.os, "fsync", full)
    assert encode_main(["--model_name_or_path", str(models["dpr"]), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "full.pkl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"error: [Errno 28] No space left on device (writing {tmp_path / 'full.pkl.vectors.partial'})"
