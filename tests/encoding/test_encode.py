"""Fault injection: encoding killed (SIGKILL) at random points resumes to exactly the uninterrupted shard.

Each case forks the test process; the child encodes with a line tracer over the encode loop (encoding/encode.py),
the shard writer and the atomic-write helper that sends itself SIGKILL at a chosen line, so it dies like ``kill -9``
anywhere:
mid-batch, between a flush and its resume state, inside an atomic write (leaving its temporary file), between the
final pickle and its sidecar. A second child may die again in the resumed run. The parent then finishes the
encode and compares shard and sidecar with an uninterrupted run's, byte for byte.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from multiview_plugin import atomic
from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.encoding import encode, shards
from multiview_plugin.encoding.encode import encode_to_shard
from multiview_plugin.encoding.shards import NonFiniteVectorsError, read_shard
from multiview_plugin.modeling import load_encoder
from multiview_plugin.registry import get_encoder_class
from tests.conftest import TOPICS
from tests.strategies import FAST, ID, bounded, workdir

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

SEEDS = range(24)
TRACED = {str(Path(m.__file__).resolve()) for m in (encode, shards, atomic)}
BATCH = 2


@pytest.fixture(scope="module")
def setup(tiny_bert, tmp_path_factory):
    """A tiny mvr model, a 20-document corpus, and the uninterrupted shards (fp32 and fp16) with their sizes
    in traced lines."""
    folder = tmp_path_factory.mktemp("faults")
    torch.manual_seed(0)
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=3),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32, query_max_len=16)).eval()
    corpus = folder / "corpus.jsonl"
    docs = [{"docid": f"d{i}", "title": a, "text": t} for i, (a, _, t) in enumerate(TOPICS)]
    docs += [{"docid": f"x{i}", "title": TOPICS[i % 8][1], "text": " ".join(TOPICS[(i * 3) % 8][2].split()[i % 4:])}
             for i in range(12)]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    reference = {}
    for fp16 in (False, True):
        out = folder / f"ref{int(fp16)}" / "c.pkl"
        lines = _count_lines(lambda out=out, fp16=fp16: encode_to_shard(model, str(corpus), out, batch_size=BATCH,
                                                                        fp16=fp16))
        reference[fp16] = (out.read_bytes(), json.loads(Path(f"{out}.json").read_text()), lines)
    return model, corpus, reference


def _count_lines(run) -> int:
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename in TRACED else None)
    try:
        run()
    finally:
        sys.settrace(None)
    return count


def _killed_at(line: int, run) -> bool:
    """Run ``run`` in a forked child that SIGKILLs itself at its ``line``-th traced line; True if it died."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            torch.set_num_threads(1)
            seen = 0

            def local(frame, event, arg):
                nonlocal seen
                if event == "line":
                    seen += 1
                    if seen == line:
                        os.kill(os.getpid(), signal.SIGKILL)
                return local

            sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename in TRACED else None)
            run()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0
        return False
    assert os.WTERMSIG(status) == signal.SIGKILL
    return True


@pytest.mark.parametrize("seed", SEEDS)
def test_killed_encode_resumes_byte_identically(setup, tmp_path, seed):
    model, corpus, reference = setup
    rng = random.Random(seed)
    fp16 = seed % 2 == 1
    expected_bytes, expected_sidecar, lines = reference[fp16]
    out = tmp_path / "c.pkl"
    every = rng.choice([1, 2, 3])

    def run() -> None:
        encode_to_shard(model, str(corpus), out, batch_size=BATCH, fp16=fp16, checkpoint_every=every)

    # seed i kills within the i-th of len(SEEDS) equal stretches of the run, so together they cover all of it
    # (the first batches through the final pickle and sidecar); half the seeds also kill the resumed run
    start = 1 + seed * lines // len(SEEDS)
    assert _killed_at(rng.randint(start, max(start, (seed + 1) * lines // len(SEEDS))), run)
    if rng.random() < 0.5:
        _killed_at(rng.randint(1, lines), run)
    run()
    assert out.read_bytes() == expected_bytes
    assert json.loads(Path(f"{out}.json").read_text()) == expected_sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pkl", "c.pkl.json"]  # no partial or temporary file


def _close_lines(setup) -> list[int]:
    """Positions (in traced lines) of every line ShardWriter.close runs itself, in an uninterrupted fp32 run."""
    model, corpus, _ = setup
    positions, count = [], 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if frame.f_code is shards.ShardWriter.close.__code__:
                positions.append(count)
        return local

    out = Path(corpus).parent / "close_lines" / "c.pkl"
    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename in TRACED else None)
    try:
        encode_to_shard(model, str(corpus), out, batch_size=BATCH)
    finally:
        sys.settrace(None)
    return positions


def test_killed_at_every_line_of_the_final_write(setup, tmp_path):
    """Every line of the final pickle + sidecar + clean-up step: the rerun ends with exactly the reference."""
    model, corpus, reference = setup
    expected_bytes, expected_sidecar, _ = reference[False]
    for i, line in enumerate(_close_lines(setup)):
        out = tmp_path / str(i) / "c.pkl"

        def run(out=out) -> None:
            encode_to_shard(model, str(corpus), out, batch_size=BATCH)

        assert _killed_at(line, run)
        run()
        assert out.read_bytes() == expected_bytes and json.loads(Path(f"{out}.json").read_text()) == expected_sidecar
        assert sorted(p.name for p in out.parent.iterdir()) == ["c.pkl", "c.pkl.json"], line


def test_encode_refuses_a_nan_batch_and_keeps_what_came_before(mvr_index, tmp_path):
    """Only the batch holding the NaN item is refused; earlier flushed batches stay resumable."""
    model = load_encoder(mvr_index["model"]).eval()
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
        encode_to_shard(model, str(mvr_index["corpus"]), out, batch_size=2, checkpoint_every=1)
    assert not out.exists()
    model.encode_passage = original
    encode_to_shard(model, str(mvr_index["corpus"]), out, batch_size=2)  # resumes after batch 1
    assert read_shard(out)[1] == read_shard(mvr_index["shard"])[1]


def test_a_huge_record_is_read_only_as_far_as_the_model_reads(mvr_index, tmp_path, caplog):
    """main: a .jsonl.gz holding one 512 MiB line went to the tokenizer whole (6.4 GB, then an abort). Now the
    text is cut at 100 characters per token of max length, said once with the count, and the vectors are the
    same as the untruncated text's (the model reads 32 tokens)."""
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    big = tmp_path / "big.jsonl.gz"
    long_text = "paris is the capital of france " * 40_000  # 1.2 M characters, 3200 x max_len
    with gzip.open(big, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"docid": "long", "text": long_text}) + "\n")
        f.write(json.dumps({"docid": "short", "text": "a cat is a small animal"}) + "\n")
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"docid": "long", "text": long_text[:4000]}) + "\n")
    common = ["--model_name_or_path", str(mvr_index["model"])]
    assert encode_main([*common, "--dataset_path", str(big), "--encode_output_path", str(tmp_path / "b.pkl")]) == 0
    assert "1 documents longer than 3200 characters (100 per token of --passage_max_len 32)" in caplog.text
    assert encode_main([*common, "--dataset_path", str(small), "--encode_output_path", str(tmp_path / "s.pkl")]) == 0
    reps, lookup, _ = read_shard(tmp_path / "b.pkl")
    ref, ref_lookup, _ = read_shard(tmp_path / "s.pkl")
    rows = [i for i, d in enumerate(lookup) if d.startswith("long")]
    np.testing.assert_allclose(reps[rows], ref, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Nothing lost: the shard sidecar's name.
# Strategies and helpers: tests/strategies.py.


@bounded(FAST)
@given(content=st.one_of(st.binary(max_size=64), st.dictionaries(ID, st.one_of(st.integers(), ID), max_size=4)
                         .map(lambda d: json.dumps(d).encode())), overwrite=st.booleans())
def test_encode_never_replaces_a_file_at_its_sidecar_path(content, overwrite):
    """Any file at ``<output>.json`` that is not a shard sidecar: encode refuses (one line, also with
    --overwrite) before writing anything."""
    from multiview_plugin.encoding.encode import refuse_foreign_output
    from multiview_plugin.errors import ConfigError

    with workdir() as tmp:
        side = tmp / "c.pkl.json"
        side.write_bytes(content)
        with pytest.raises(ConfigError) as err:
            refuse_foreign_output(tmp / "c.pkl", overwrite)
        assert "\n" not in str(err.value) and str(side) in str(err.value) and side.read_bytes() == content
