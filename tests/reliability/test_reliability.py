"""Nothing silently wrong: encode resume that cannot mix runs, safe shard loading, complete shard sets."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import encode_to_shard
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import ShardFormatError, partial_paths, read_shard
from multiview_plugin.modeling import load_encoder
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS, write_topics_corpus


def _build(tiny_bert: Path, folder: Path, name: str = "mvr", seed: int = 0) -> Path:
    torch.manual_seed(seed)
    model = get_encoder_class(name).build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name=name, mvr_num_views=3),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16))
    if seed:  # "another checkpoint": the same architecture, other weights
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.01 * torch.randn_like(param))
    model.save(folder)
    return folder


@pytest.fixture(scope="module")
def models(tiny_bert, tmp_path_factory) -> dict[str, Path]:
    """mvr, the same mvr with other weights (another checkpoint), and a dpr model."""
    return {"mvr": _build(tiny_bert, tmp_path_factory.mktemp("mvr")),
            "mvr_other": _build(tiny_bert, tmp_path_factory.mktemp("mvr_other"), seed=1),
            "dpr": _build(tiny_bert, tmp_path_factory.mktemp("dpr"), name="dpr")}


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_topics_corpus(tmp_path / "corpus.jsonl")


class Crash(RuntimeError):
    """Stands in for a kill: raised by the model in the middle of an encode."""


def _crash_after(model, batches: int) -> None:
    """Make ``model`` die at its (batches+1)-th passage batch (encode_passage is an instance attribute)."""
    original, calls = type(model).encode_passage.__get__(model), {"n": 0}

    def dying(batch):
        calls["n"] += 1
        if calls["n"] > batches:
            raise Crash
        return original(batch)

    model.encode_passage = dying


def _interrupted(model_dir: Path, corpus: Path, out: Path, batches: int = 2, **kwargs) -> None:
    model = load_encoder(model_dir).eval()
    _crash_after(model, batches)
    with pytest.raises(Crash):
        encode_to_shard(model, str(corpus), out, batch_size=2, checkpoint_every=1, **kwargs)
    assert partial_paths(out)[2].is_file() and not out.exists()


# --------------------------------------------------------------------------- resume cannot mix runs


@pytest.mark.parametrize("change, field", [
    ({"model": "mvr_other"}, "model_weights"),       # another checkpoint of the same method
    ({"model": "dpr"}, "model_name"),                # another method
    ({"fp16": True}, "dtype"),
    ({"num_shards": 2, "shard_index": 1}, "shard_index"),
])
def test_resume_refuses_a_different_run(models, corpus, tmp_path, change, field):
    out = tmp_path / "c.pkl"
    kwargs = {"num_shards": 2, "shard_index": 0} if "shard_index" in change else {}
    _interrupted(models["mvr"], corpus, out, batches=1, **kwargs)
    model = load_encoder(models[change.get("model", "mvr")]).eval()
    options = {k: v for k, v in change.items() if k != "model"}
    with pytest.raises(ShardFormatError, match=f"cannot resume.*different .*{field} \\(was"):
        encode_to_shard(model, str(corpus), out, batch_size=2, **options)
    assert not out.exists()


def test_resume_refuses_another_input_and_length(models, corpus, tmp_path):
    out = tmp_path / "c.pkl"
    _interrupted(models["mvr"], corpus, out)
    model = load_encoder(models["mvr"]).eval()
    other = tmp_path / "other.jsonl"
    other.write_text(corpus.read_text().replace("paris", "rome"))
    with pytest.raises(ShardFormatError, match="different input"):
        encode_to_shard(model, str(other), out, batch_size=2)
    model.config.passage_max_len = 16  # the driver's --passage_max_len
    with pytest.raises(ShardFormatError, match="different max_len"):
        encode_to_shard(model, str(corpus), out, batch_size=2)


def test_finished_shard_is_not_skipped_for_another_model_or_corpus(models, corpus, tmp_path, capsys):
    out = tmp_path / "c.pkl"
    args = ["--dataset_path", str(corpus), "--encode_output_path", str(out), "--per_device_eval_batch_size", "2"]
    assert encode_main(["--model_name_or_path", str(models["mvr"]), *args]) == 0
    assert json.loads((tmp_path / "c.pkl.json").read_text())["fingerprint"]["model_name"] == "mvr"
    assert encode_main(["--model_name_or_path", str(models["mvr"]), *args]) == 0  # same run: skipped
    assert encode_main(["--model_name_or_path", str(models["mvr_other"]), *args]) == 2
    err = capsys.readouterr().err
    assert "cannot skip the finished shard" in err and "model_weights" in err and "--overwrite" in err
    corpus.write_text(corpus.read_text().replace("paris", "rome"))
    assert encode_main(["--model_name_or_path", str(models["mvr"]), *args]) == 2
    assert "different input" in capsys.readouterr().err


def test_overwrite_removes_partial_files(models, corpus, tmp_path):
    out, fresh = tmp_path / "c.pkl", tmp_path / "fresh.pkl"
    _interrupted(models["mvr"], corpus, out)
    stray_tmp = tmp_path / ".c.pkl.123.abcd.tmp"  # what a kill during an atomic write leaves
    stray_tmp.write_bytes(b"x")
    other = load_encoder(models["mvr_other"]).eval()
    encode_to_shard(other, str(corpus), out, batch_size=2, overwrite=True)
    encode_to_shard(other, str(corpus), fresh, batch_size=2)
    assert out.read_bytes() == fresh.read_bytes()  # nothing of the first model's rows survived
    assert not any(p.exists() for p in partial_paths(out)) and not stray_tmp.exists()


def test_resume_with_the_same_run_is_byte_identical(models, corpus, tmp_path):
    out, fresh = tmp_path / "c.pkl", tmp_path / "fresh.pkl"
    _interrupted(models["mvr"], corpus, out)
    model = load_encoder(models["mvr"]).eval()
    encode_to_shard(model, str(corpus), out, batch_size=2)
    encode_to_shard(model, str(corpus), fresh, batch_size=2)
    assert out.read_bytes() == fresh.read_bytes()
    assert json.loads((tmp_path / "c.pkl.json").read_text()) == json.loads((tmp_path / "fresh.pkl.json").read_text())


# --------------------------------------------------------------------------- safe shard loading


class _Exploit:
    """A pickle payload that creates a marker file when loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_shard_is_refused_without_running(models, corpus, tmp_path, capsys):
    emb, marker = tmp_path / "emb", tmp_path / "pwned"
    emb.mkdir()
    with open(emb / "corpus.0.pkl", "wb") as f:
        pickle.dump((np.ones((1, 4), dtype=np.float32), [_Exploit(marker)]), f)
    with pytest.raises(ShardFormatError, match="refusing to unpickle posix.system"):
        read_shard(emb / "corpus.0.pkl")
    assert index_main(["--passage_reps", str(emb / "*.pkl"), "--index_dir", str(tmp_path / "idx")]) == 2
    assert "--allow_unsafe_pickle" in capsys.readouterr().err
    assert search_main(["--query_reps", str(emb / "corpus.0.pkl"), "--passage_reps", str(emb / "*.pkl"),
                        "--save_ranking_to", str(tmp_path / "run.txt")]) == 2
    assert "refusing to unpickle" in capsys.readouterr().err
    assert not marker.exists()
    # plain pickle only when asked: the same file then runs its payload
    read_shard(emb / "corpus.0.pkl", unsafe_pickle=True)
    assert marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_tevatron_shards_load_safely(tmp_path, protocol):
    """Tevatron's payload in every protocol, fp16 and fp32, ids as a list, a numpy array or numpy ints."""
    path = tmp_path / "t.pkl"
    for reps, ids in [(np.ones((2, 3), np.float32), ["a", "b"]), (np.ones((2, 3), np.float16), np.array(["a", "b"])),
                      (np.ones((2, 3), np.float32), [np.int64(7), np.int64(8)]),
                      (np.ones((2, 3), np.float32), np.array(["a", "b"], dtype=object))]:
        path.write_bytes(pickle.dumps((reps, ids), protocol=protocol))
        got, lookup, _ = read_shard(path)
        assert got.dtype == reps.dtype and lookup == [str(x) for x in ids]


# --------------------------------------------------------------------------- complete shard sets


def _encode_shards(model_dir: Path, corpus: Path, emb: Path, num_shards: int) -> None:
    for i in range(num_shards):
        assert encode_main(["--model_name_or_path", str(model_dir), "--dataset_path", str(corpus),
                            "--dataset_number_of_shards", str(num_shards), "--dataset_shard_index", str(i),
                            "--encode_output_path", str(emb / f"corpus.{i}.pkl")]) == 0


@pytest.fixture
def queries(tmp_path) -> Path:
    path = tmp_path / "queries.tsv"
    path.write_text("".join(f"q{i}\twhat is {a}\n" for i, (a, _, _) in enumerate(TOPICS)))
    return path


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


# --------------------------------------------------------------------------- ids


@pytest.mark.parametrize("docid, shown", [(r"a\nb", r"'\n'"), ("a b", "' '"), (r"a\tb", r"'\t'"),
                                          (r"a\u0000b", r"'\x00'"), (r"a\u200bb", r"'\u200b'")])
def test_docids_with_whitespace_or_control_characters_are_refused_at_read(models, tmp_path, capsys, docid, shown):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"docid": "ok", "text": "fine"}\n' f'{{"docid": "{docid}", "text": "x"}}\n')
    rc = encode_main(["--model_name_or_path", str(models["dpr"]), "--dataset_path", str(path),
                      "--encode_output_path", str(tmp_path / "o.pkl")])
    err = capsys.readouterr().err
    assert rc == 2 and "corpus.jsonl line 2: field 'docid'" in err and shown in err, err
    assert not (tmp_path / "o.pkl").exists() and not partial_paths(tmp_path / "o.pkl")[0].exists()


def test_tsv_docid_and_query_id_with_a_space(tmp_path):
    from multiview_plugin.data.readers import InputFormatError, load_corpus, load_queries

    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n1\tparis\tfrance\n2 3\trome\titaly\n")
    with pytest.raises(InputFormatError, match=r"psgs.tsv line 3: field 'id': docid '2 3' contains whitespace"):
        load_corpus(tsv)
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query_id": "q 1", "query": "what"}\n')
    with pytest.raises(InputFormatError, match="q.jsonl line 1: field 'query_id': query id 'q 1' contains"):
        load_queries(queries)


# --------------------------------------------------------------------------- smaller: clear errors, documented fixes


def test_empty_train_file_and_query_without_negatives(tiny_bert, tmp_path, capsys):
    from multiview_plugin.driver.train import main as train_main

    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()
    argv = ["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(path),
            "--output_dir", str(tmp_path / "out"), "--train_group_size", "2", "--report_to", "none"]
    path.write_text("\n")
    assert train_main(argv) == 2
    assert f"{path}: the training file is empty" in capsys.readouterr().err
    path.write_text('{"query_id": "0", "query": "who", "positive_passages": [{"docid": "d0", "text": "paris"}], '
                    '"negative_passages": [{"docid": "d1", "text": "rome"}]}\n'
                    '{"query_id": "1", "query": "what", "positive_passages": [{"docid": "d0", "text": "paris"}]}\n')
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    # refused while loading (nothing trained), naming the file with its folder
    assert f"{path} line 2: field 'negative_passages': --train_group_size 2 needs hard negatives" in err
    assert not (tmp_path / "out").exists()


def test_a_positive_listed_as_negative_is_dropped_with_a_warning(tmp_path, caplog):
    from multiview_plugin.data.readers import iter_train_records

    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"query_id": "0", "query": "who", "positive_passages": [
        {"docid": "d0", "text": "paris"}], "negative_passages": [
        {"docid": "d0", "text": "paris"}, {"docid": "d1", "text": "rome"}, {"text": "paris"}],
        "answers": []}) + "\n")
    caplog.set_level("WARNING")
    (rec,) = iter_train_records(path)
    assert rec["negatives"] == ["rome"] and rec["negative_docids"] == ["d1"] and rec["negative_sentences"] == [-1]
    assert "dropped 2 negative passages that are also positives of their query (in 1 queries)" in caplog.text


def test_dpr_converter_without_positives_is_an_error(tmp_path):
    from multiview_plugin.data.dpr import convert_dpr_biencoder
    from multiview_plugin.data.readers import InputFormatError

    src = tmp_path / "biencoder.json"
    src.write_text(json.dumps([{"question": "who", "answers": ["x"], "positive_ctxs": [],
                                "hard_negative_ctxs": [{"title": "t", "text": "x"}]}]))
    with pytest.raises(InputFormatError, match="none of its 1 records has a positive passage"):
        convert_dpr_biencoder(src, tmp_path / "train.jsonl")
    assert not (tmp_path / "train.jsonl").exists()


def test_dcsr_sampler_skips_an_empty_hard_negative(tiny_bert):
    from multiview_plugin.data.sentence_dataset import SentenceTrainDataset

    model = get_encoder_class("dcsr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="dcsr"),
                                            DataArguments(pad_to_multiple_of=None, passage_max_len=64))
    rec = {"query_id": "q", "query": "who built paris", "answers": ["river"], "positive_docids": ["d0"],
           "positives": ["paris is the capital. it was built on the river. it is old."],
           "negative_docids": ["e", "d1"], "negatives": ["", "london is the capital of england."],
           "negative_sentences": [-1, -1], "source": "t.jsonl:1"}
    ds = SentenceTrainDataset([rec], model.formatter, in_passage_negatives=0, bm25_negatives=2)
    for epoch in range(3):  # every epoch's window lands on the non-empty passage
        ds.set_epoch(epoch)
        item = ds[0]
        assert len(item["passages"]) == 3 and all(item["passages"][1:])


def test_temperature_below_the_annealing_floor_is_refused(tiny_bert):
    from multiview_plugin.errors import ConfigError

    args = dict(model_name_or_path=str(tiny_bert), model_name="mvr", temperature=0.1,
                temperature_schedule="annealed", mvr_min_temperature=0.3)
    with pytest.raises(ConfigError, match=r"--temperature 0.1 is below --mvr_min_temperature 0.3"):
        get_encoder_class("mvr").build(ModelArguments(**args), DataArguments())
    args["mvr_min_temperature"] = 0.05  # below the start: the schedule anneals from 0.1 to 0.05
    assert get_encoder_class("mvr").build(ModelArguments(**args), DataArguments()).temperature == pytest.approx(0.1)


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


# --------------------------------------------------------------------------- checkpoints (see also test_train_driver)


def test_checkpoint_completeness_checks(tmp_path):
    from safetensors.torch import save_file

    from multiview_plugin.training.checkpoints import checkpoint_problems, last_complete_checkpoint

    def checkpoint(step: int, optimizer: bool = True) -> Path:
        folder = tmp_path / f"checkpoint-{step}"
        (folder / "passage_model").mkdir(parents=True)  # untied encoders: weights in subfolders
        save_file({"w": torch.ones(4, 4)}, str(folder / "passage_model" / "model.safetensors"))
        (folder / "multiview_config.json").write_text("{}")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        if optimizer:
            for name in ("optimizer.pt", "scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"):
                torch.save({"x": torch.zeros(3)}, folder / name)
        return folder

    good, newest = checkpoint(5), checkpoint(10)
    assert checkpoint_problems(good) == [] and checkpoint_problems(newest) == []
    weights = newest / "passage_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # cut short while saving
    (newest / "rng_state_1.pth").write_bytes(b"")
    size = weights.stat().st_size
    assert checkpoint_problems(newest) == [
        f"passage_model/model.safetensors {size} bytes, header describes {size + 10}",
        "rng_state_1.pth unreadable (File is not a zip file)"]
    assert last_complete_checkpoint(tmp_path) == str(good)
    only_model = checkpoint(20, optimizer=False)  # --save_only_model
    assert checkpoint_problems(only_model, optimizer_expected=False) == []
    assert "optimizer.pt missing" in checkpoint_problems(only_model)
    assert last_complete_checkpoint(tmp_path, optimizer_expected=False) == str(only_model)


def test_every_fingerprint_field_tracks_its_option(models, corpus, tmp_path):
    """Each encode option that changes a shard's bytes changes exactly its fingerprint field; moving the
    corpus or the model folder does not."""
    from multiview_plugin.encoding.fingerprint import differing_fields, encode_fingerprint

    model = load_encoder(models["mvr"])
    pq_a, pq_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    pq_a.write_text('{"docid": "d0", "queries": ["x"]}\n')
    pq_b.write_text('{"docid": "d0", "queries": ["y"]}\n')
    base = dict(is_query=False, num_shards=2, shard_index=0, dtype="float32", separator=" ", pseudo_queries=str(pq_a))
    ref = encode_fingerprint(model, corpus, **base)
    moved = tmp_path / "moved.jsonl"
    moved.write_bytes(corpus.read_bytes())
    assert differing_fields(ref, encode_fingerprint(load_encoder(models["mvr"]), moved, **base)) == []
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(corpus.read_bytes().replace(b"paris", b"rome!"))
    assert differing_fields(ref, encode_fingerprint(model, edited, **base)) == ["input"]
    for change, field in [({"num_shards": 3}, "num_shards"), ({"shard_index": 1}, "shard_index"),
                          ({"dtype": "float16"}, "dtype"), ({"separator": " | "}, "passage_field_separator"),
                          ({"pseudo_queries": str(pq_b)}, "pseudo_queries")]:
        assert differing_fields(ref, encode_fingerprint(model, corpus, **{**base, **change})) == [field]
    query = encode_fingerprint(model, corpus, **{**base, "is_query": True})
    assert differing_fields(ref, query) == ["max_len", "is_query", "passage_field_separator", "pseudo_queries"]
    model.config.passage_max_len = 8
    assert differing_fields(ref, encode_fingerprint(model, corpus, **base)) == ["max_len"]
    model.config.options["mvr_num_views"] = 5
    assert "model_config" in differing_fields(ref, encode_fingerprint(model, corpus, **base))
