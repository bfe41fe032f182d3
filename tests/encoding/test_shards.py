"""Shards (encoding/shards.py): loaded safely (no pickle code runs), ids refused at read."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.index import main as index_main
from multiview_plugin.driver.search import main as search_main
from multiview_plugin.encoding.shards import ShardFormatError, partial_paths, read_shard


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
