"""What determines a shard's bytes (encoding/fingerprint.py): an encode resume that cannot mix runs, a finished shard
not skipped for another model or input, and every fingerprint field tracking its option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.encoding.shards import ShardFormatError, partial_paths
from multiview_plugin.modeling import load_encoder


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


# --------------------------------------------------------------------------- every fingerprint field


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
