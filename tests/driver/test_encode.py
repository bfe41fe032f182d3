"""multiview_plugin.driver.encode: each shared text option given on the command line overrides the saved model's
setting, whatever its value (``--normalize False`` on a model saved with ``normalize`` included), and says so; not
given, the saved setting holds. One case per option of multiview_plugin.text_options."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.readers import load_corpus
from multiview_plugin.driver.encode import EncodeArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.encoding.command import load_model
from multiview_plugin.encoding.shards import read_shard
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.text_options import OPTION_NAMES
from tests.conftest import build_tiny_model, one_line_error, without_progress_bars, write_topics_corpus
from tests.strategies import (
    DAMAGE,
    SLOW,
    bounded,
    corpora,
    corpus_lines,
    damage,
    nonblank_lines,
    run_driver,
    workdir,
    write_lines,
)
from tools.testing import make_tiny_t5

TEXTS = ["paris is the capital of france and was built on the river", "the moon", "a cat is a small animal"]
MODEL_FLAGS = {"pooling", "normalize"}  # the others are DataArguments'


def save(backbone: Path, folder: Path, **options) -> Path:
    """A dpr model saved with these shared options (the rest: the defaults)."""
    model_kw = {k: v for k, v in options.items() if k in MODEL_FLAGS}
    data_kw = {k: v for k, v in options.items() if k not in MODEL_FLAGS}
    model = get_encoder_class("dpr").build(ModelArguments(model_name_or_path=str(backbone), **model_kw),
                                           DataArguments(**data_kw))
    model.save(folder)
    return folder


def encode(model: Path, tmp_path: Path, *flags: str, query: bool = False) -> np.ndarray:
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"query_id" if query else "docid": f"x{i}", "query" if query else "text": t})
                            + "\n" for i, t in enumerate(TEXTS)))
    out = tmp_path / f"out{len(list(tmp_path.glob('out*.pkl')))}.pkl"
    argv = ["--model_name_or_path", str(model), "--dataset_path", str(data), "--encode_output_path", str(out),
            "--device", "cpu", *(["--encode_is_query"] if query else []), *flags]
    assert encode_main(argv) == 0
    return read_shard(out)[0]


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory) -> Path:
    return make_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))


# (option, the saved value, the value given, its flag words, the backbone, other saved options, query side)
CASES = [
    ("pooling", "cls", "mean", ["--pooling", "mean"], "bert", {}, False),
    ("normalize", True, False, ["--normalize", "False"], "bert", {}, False),
    ("normalize", True, False, ["--no_normalize"], "bert", {}, False),
    ("normalize", False, True, ["--normalize"], "bert", {}, True),
    ("query_max_len", 32, 4, ["--query_max_len", "4"], "bert", {}, True),
    ("passage_max_len", 128, 4, ["--passage_max_len", "4"], "bert", {}, False),
    ("query_prefix", "", "what ", ["--query_prefix", "what "], "bert", {}, True),
    ("passage_prefix", "", "title ", ["--passage_prefix", "title "], "bert", {}, False),
    ("padding_side", "right", "left", ["--padding_side", "left"], "bert", {}, False),
    ("padding_side", "left", "right", ["--padding_side", "right"], "bert", {}, False),
    ("append_eos_token", False, True, ["--append_eos_token"], "t5", {"pooling": "mean"}, False),
    ("append_eos_token", True, False, ["--append_eos_token", "False"], "t5", {"pooling": "mean"}, False),
    ("add_special_tokens", True, False, ["--add_special_tokens", "False"], "bert", {}, False),
    ("add_special_tokens", False, True, ["--add_special_tokens", "True"], "bert", {}, True),
]


@pytest.mark.parametrize("option, saved, given, flags, backbone, other, query", CASES,
                         ids=[f"{c[0]}:{c[1]!r}->{' '.join(c[3])}" for c in CASES])
def test_a_given_option_overrides_the_saved_model(option, saved, given, flags, backbone, other, query, tiny_bert,
                                                  tiny_t5, tmp_path, caplog):
    """``encode --<option> X`` on a model saved with another value encodes exactly as a model saved with X, and
    differently from the saved model; the override is logged."""
    base = tiny_bert if backbone == "bert" else tiny_t5
    model = save(base, tmp_path / "saved", **other, **{option: saved})
    as_given = save(base, tmp_path / "given", **other, **{option: given})
    (tmp_path / "enc").mkdir()
    with caplog.at_level(logging.INFO, logger="multiview_plugin"):
        overridden = encode(model, tmp_path / "enc", *flags, query=query)
    assert f"--{option} {given!r} overrides the saved model's {saved!r}" in caplog.text
    np.testing.assert_allclose(overridden, encode(as_given, tmp_path / "enc", query=query), atol=1e-5)
    own = encode(model, tmp_path / "enc", query=query)
    assert not np.allclose(overridden, own, atol=1e-4), f"--{option} changed nothing"


def test_every_shared_option_has_a_case():
    assert {c[0] for c in CASES} | {"pad_to_multiple_of"} == set(OPTION_NAMES)


@pytest.mark.parametrize("saved, given, width", [(None, 8, 16), (16, 0, 14)])
def test_pad_to_multiple_of_overrides_the_saved_model(saved, given, width, tiny_bert, tmp_path, caplog):
    """Padding changes no vector (the pad tokens are masked), only the batch width: checked on the model encode
    loads (given 0 on a model saved with 16: no rounding)."""
    model = save(tiny_bert, tmp_path / "m", pad_to_multiple_of=saved)
    args = EncodeArguments(model_name_or_path=str(model), pad_to_multiple_of=given)
    with caplog.at_level(logging.INFO, logger="multiview_plugin"):
        loaded = load_model(args)
    assert loaded.config.pad_to_multiple_of == given
    assert f"--pad_to_multiple_of {given!r} overrides the saved model's {saved!r}" in caplog.text
    batch = loaded.formatter.passages(["paris is the capital of france and was built on the river"])
    assert batch["input_ids"].shape[1] == width  # 14 real tokens


def test_not_given_keeps_the_saved_setting_and_logs_nothing(tiny_bert, tmp_path, caplog):
    model = save(tiny_bert, tmp_path / "m", normalize=True, pooling="mean", passage_prefix="title ")
    with caplog.at_level(logging.INFO, logger="multiview_plugin"):
        loaded = load_model(EncodeArguments(model_name_or_path=str(model)))
    assert (loaded.config.normalize, loaded.config.pooling, loaded.config.passage_prefix) == (True, "mean", "title ")
    assert "overrides" not in caplog.text
    np.testing.assert_allclose(np.linalg.norm(encode(model, tmp_path), axis=1), 1.0, atol=1e-5)


def test_a_given_value_equal_to_the_saved_one_is_logged_as_such(tiny_bert, tmp_path, caplog):
    model = save(tiny_bert, tmp_path / "m", normalize=True)
    with caplog.at_level(logging.INFO, logger="multiview_plugin"):
        load_model(EncodeArguments(model_name_or_path=str(model), normalize=True))
    assert "--normalize True: the saved model's own setting" in caplog.text


def test_a_bad_value_is_one_line(tiny_bert, tmp_path, capsys):
    model = save(tiny_bert, tmp_path / "m")
    with pytest.raises(SystemExit) as exit_:
        encode_main(["--model_name_or_path", str(model), "--encode_output_path", str(tmp_path / "o.pkl"),
                     "--dataset_path", "x", "--padding_side", "middle"])
    assert exit_.value.code == 2
    err = without_progress_bars(capsys.readouterr().err).strip()
    assert err.startswith("error: argument --padding_side") and "invalid choice: 'middle'" in err and "\n" not in err


def test_encode_refuses_nan_vectors_naming_the_docid(tiny_bert, tmp_path, capsys):
    model = build_tiny_model(tiny_bert, tmp_path / "nan-model", scale=float("nan"))
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "c.pkl"
    assert encode_main(["--model_name_or_path", str(model), "--dataset_path", str(corpus),
                        "--encode_output_path", str(out)]) == 2
    one_line_error(capsys, str(out), "non-finite vectors", "'d0'", "NaN")
    assert not out.exists() and not Path(f"{out}.json").exists()


def test_encode_refuses_vectors_that_overflow_float16(tiny_bert, tmp_path, capsys):
    """--fp16 stores float16: vectors beyond ±65504 would become inf; the error says so and names the items."""
    model = build_tiny_model(tiny_bert, tmp_path / "big", name="dpr", scale=1e6)
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\twhat is paris\nq2\twhere is rome\n")
    out = tmp_path / "q.pkl"
    args = ["--model_name_or_path", str(model), "--dataset_path", str(queries), "--encode_is_query",
            "--encode_output_path", str(out)]
    assert encode_main([*args, "--fp16"]) == 2
    one_line_error(capsys, "overflow float16", "'q1'", "without --fp16")
    assert not out.exists()
    assert encode_main(args) == 0  # float32 holds them
    assert np.isfinite(read_shard(out)[0]).all()


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# The encode driver over generated and damaged corpora.
# Strategies and helpers: tests/strategies.py.


@pytest.fixture(scope="module")
def tiny_dpr(tiny_bert, tmp_path_factory) -> Path:
    import torch

    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("props_dpr")
    get_encoder_class("dpr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="dpr"),
                                   DataArguments(pad_to_multiple_of=None, passage_max_len=16,
                                                 query_max_len=8)).save(folder)
    return folder


@bounded(SLOW)
@given(docs=corpora(), kind=st.sampled_from(["none", "blank", "crlf", "dup_id", "surrogate", "bad_json", "empty_text",
                                             "damage"]),
       hit=DAMAGE)
def test_encode_driver_over_corpora_equals_reference_or_one_line(tiny_dpr, docs, kind, hit):
    with workdir() as tmp:
        lines = corpus_lines(docs, "jsonl")
        if kind == "dup_id":
            lines.append(lines[0])
        elif kind == "surrogate":
            lines[-1] = lines[-1].replace('"text": "', '"text": "\\udfff', 1)
        elif kind == "bad_json":
            lines[0] = lines[0][:-2]
        elif kind == "empty_text":
            obj = json.loads(lines[-1])
            obj["text"], obj["title"] = " ", None
            lines[-1] = json.dumps(obj)
        path = write_lines(tmp / "c.jsonl", lines, crlf=kind == "crlf", blank=frozenset({1}) if kind == "blank"
                           else frozenset())
        if kind == "damage":
            path.write_bytes(damage(path.read_bytes(), *hit))
        out = tmp / "c.pkl"
        rc, err = run_driver(__import__("multiview_plugin.driver.encode", fromlist=["main"]).main,
                             ["--model_name_or_path", str(tiny_dpr), "--dataset_path", str(path),
                              "--encode_output_path", str(out), "--per_device_eval_batch_size", "4"])
        if rc:
            assert str(path) in err or str(out) in err, err
            assert kind not in ("none", "blank", "crlf"), err
            assert not out.exists()
            return
        assert kind in ("none", "blank", "crlf", "damage"), kind
        reps, lookup, _ = read_shard(out)
        expected = list(load_corpus(path))  # the reader's output is checked against its reference above
        assert lookup == expected and len(lookup) == len(nonblank_lines(path.read_bytes()))
        assert np.isfinite(reps).all() and all(math.isfinite(x) for x in reps[:, 0])
