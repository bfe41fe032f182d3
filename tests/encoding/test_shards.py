"""Shards (encoding/shards.py): loaded safely (no pickle code runs), ids refused at read."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from multiview_plugin.data.readers import InputFormatError, load_corpus
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import ShardFormatError, partial_paths, read_shard
from tests.conftest import one_line_error
from tests.strategies import DAMAGE, MEDIUM, bounded, damage, one_line, shard_payloads, workdir


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


def _crafted(tmp_path: Path, reps: np.ndarray, lookup) -> Path:
    path = tmp_path / "crafted.pkl"
    path.write_bytes(pickle.dumps((reps, lookup), protocol=4))
    return path


def test_crafted_lookup_that_expands_is_refused_before_converting(tmp_path, capsys):
    big = "x" * 100_000
    # 1 row whose id is a list referencing one 100 KB string 1000 times: str() would make it 100 MB
    path = _crafted(tmp_path, np.zeros((1, 4), dtype=np.float32), [[big] * 1000])
    assert path.stat().st_size < 200_000
    with pytest.raises(ShardFormatError, match="lookup ids must be strings or integers, got list"):
        read_shard(path)
    # 100 000 rows sharing one 1000-character id: 100 MB of ids (and of docid file) from a < 1 MB file
    path = _crafted(tmp_path, np.zeros((100_000, 1), dtype=np.float16), ["x" * 1000] * 100_000)
    assert path.stat().st_size < 1_000_000
    with pytest.raises(ShardFormatError, match="more than its .* bytes can store"):
        read_shard(path)
    assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx"), "--allow_partial"]) == 2
    one_line_error(capsys, str(path), "crafted")
    # a huge integer id (str() of it raises past 4300 digits), a 2-d lookup, a length mismatch, 0-dim rows
    for reps, lookup, needle in [(np.zeros((1, 4)), [10 ** 5000], "more than 18 digits"),
                                 (np.zeros((1, 4)), np.array([["a"]]), "1-d list"),
                                 (np.zeros((2, 4)), ["a"], "2 vector rows do not match 1"),
                                 (np.zeros((3, 0)), ["a", "b", "c"], "non-empty rows")]:
        with pytest.raises(ShardFormatError, match=needle):
            read_shard(_crafted(tmp_path, reps, lookup))
    # ordinary Tevatron lookups still load: strings, integers, numpy arrays of either
    for lookup in (["a", "b"], [1, 2], np.array([1, 2]), np.array(["a", "b"]), ("a", "b")):
        assert read_shard(_crafted(tmp_path, np.zeros((2, 4), dtype=np.float32), lookup))[1] == [
            str(x) for x in lookup]


def test_a_lookup_id_too_long_is_refused_before_allocating(tmp_path, capsys):
    """main: a shard whose ids include one huge string (here 2 M characters among 20 000 rows: 160 GB as a
    fixed-width docid array) was a MemoryError traceback at index time; now one line, before any allocation."""
    huge = "x" * 2_000_000
    for lookup in ([huge] + [f"d{i}" for i in range(19_999)], np.array([huge, "d1"])):  # a list, a "<U" array
        path = _crafted(tmp_path, np.zeros((len(lookup), 2), dtype=np.float16), lookup)
        with pytest.raises(ShardFormatError, match="lookup row 0: an id of 2000000 characters, longer than the 1024"):
            read_shard(path)
        assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx"), "--allow_partial"]) == 2
        one_line_error(capsys, str(path), "2000000 characters")
    corpus = tmp_path / "corpus.jsonl"  # read from a corpus: refused at its line
    corpus.write_text(json.dumps({"docid": "y" * 5000, "text": "t"}) + "\n")

    with pytest.raises(InputFormatError, match="line 1.*of 5000 characters .* longer than the 1024"):
        load_corpus(corpus)


@pytest.mark.parametrize("bad_id", ["a b", "a\nb", "", "tab\tid", "zero\u200bwidth"])
def test_shard_ids_that_would_corrupt_line_files_are_refused(tmp_path, capsys, bad_id):
    """An id with a line end shifted every later docid line of the index by one (exit 0)."""
    path = _crafted(tmp_path, np.eye(3, 4, dtype=np.float32), ["d1", bad_id, "d3"])
    assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx"), "--allow_partial"]) == 2
    one_line_error(capsys, str(path), "lookup row 1")
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("lookup, row", [(["a#0", "a#1", "b"], 2), (["a", "b#0"], 0), (["a#1", "a#2"], 0),
                                         (["a#0", "b#0", "b#2"], 2)])
def test_sidecar_less_shard_with_ambiguous_ids_is_one_line(mvr_index, tmp_path, capsys, lookup, row):
    """main: the index driver read any '#' in the first 1000 ids as multi-vector (exit 0) while search read the same
    file as single-vector; a lookup that is neither all plain docids nor all docid#j is now refused by both."""
    dim = json.loads((mvr_index["index"] / "multiview.json").read_text())["dim"]
    path = _crafted(tmp_path, np.eye(len(lookup), dim, dtype=np.float32), lookup)
    assert index_main(["--passage_reps", str(path), "--index_dir", str(tmp_path / "idx")]) == 2
    one_line_error(capsys, str(path), f"row {row}", repr(lookup[row]), "no sidecar")
    assert not (tmp_path / "idx").exists()
    for extra in ([], ["--shard_search"]):
        assert search_main(["--query_reps", str(mvr_index["qshard"]), "--passage_reps", str(path), "--save_ranking_to",
                            str(tmp_path / "run.txt"), *extra]) == 2
        one_line_error(capsys, str(path), f"row {row}")


# ----------------------------------------------------------------------------- property-based tests (hypothesis)
# Byte-level damage to a shard pickle.
# Strategies and helpers: tests/strategies.py.


@bounded(MEDIUM)
@given(payload=shard_payloads(), hit=DAMAGE)
def test_damaged_shard_never_traceback(payload, hit):
    """Byte-level damage to a shard pickle: a one-line error naming it, or what the damaged file holds
    (a flipped byte inside the float data is still a valid shard)."""
    reps, ids = payload
    with workdir() as tmp:
        shard = tmp / "shard.pkl"
        shard.write_bytes(damage(pickle.dumps((reps, ids), protocol=5), *hit))
        try:
            got, lookup, _ = read_shard(shard)
        except ShardFormatError as err:
            one_line(err, shard)
            return
        assert got.shape == reps.shape and len(lookup) == len(ids) and np.isfinite(got).all()
