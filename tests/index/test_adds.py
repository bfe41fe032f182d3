"""Bounded memory while building an index: the training sample is capped, an IVF index's lists are sized before
the adds (no growth headroom), and the presized build is the index Faiss's own ``add`` builds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from multiview_plugin.encoding.shards import ShardInfo, ShardWriter
from multiview_plugin.index import build
from multiview_plugin.index.adds import PresizedIVFAdds
from multiview_plugin.index.build import build_index
from multiview_plugin.index.faiss_build import make_faiss_index

ROOT = Path(__file__).resolve().parents[2]


def write_shards(folder: Path, n_shards: int, docs: int, views: int, dim: int, dtype: str = "float32",
                 seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(n_shards):
        info = ShardInfo(model_name="mvr", dim=0, views_per_doc=0, dtype=dtype, num_items=0, num_vectors=0,
                         shard_index=s, num_shards=n_shards)
        writer = ShardWriter(folder / f"corpus.{s}.pkl", info, multi_vector=True)
        writer.add([f"s{s}d{i}" for i in range(docs)], rng.standard_normal((docs, views, dim), dtype=np.float32))
        writer.close()
        paths.append(folder / f"corpus.{s}.pkl")
    return paths


def test_training_reads_a_capped_sample(tmp_path, monkeypatch):
    """IVF training gets at most ``train_size`` vectors (one more per shard from rounding), however big the
    corpus: 5 shards x 1,600 vectors, train_size 500."""
    paths = write_shards(tmp_path / "shards", 5, 400, 4, 8)
    seen = []
    real_train = build.train_faiss_index
    monkeypatch.setattr(build, "train_faiss_index", lambda index, sample, *a: (seen.append(sample.shape),
                                                                                real_train(index, sample, *a)))
    build_index(paths, tmp_path / "ivf", index_factory="IVF4,SQ8", train_size=500)
    assert len(seen) == 1 and seen[0][1] == 8
    assert 500 <= seen[0][0] <= 500 + len(paths)


@pytest.mark.parametrize("factory", ["IVF8,SQ8", "IVF8,PQ4x4", "IVF8,Flat"])
def test_presized_ivf_build_is_faiss_add_row_for_row(tmp_path, monkeypatch, factory):
    """The lists sized first and the adds reusing the first pass's assignments give the bytes Faiss's ``add``
    gives; the assignments file does not end up in the index folder."""
    paths = write_shards(tmp_path / "shards", 3, 300, 3, 16, dtype="float16")
    adds = []
    real_add = PresizedIVFAdds.add
    monkeypatch.setattr(PresizedIVFAdds, "add", lambda self, chunk: (adds.append(len(chunk)),
                                                                           real_add(self, chunk)))
    presized = build_index(paths, tmp_path / "presized", index_factory=factory)
    assert sum(adds) == presized.num_vectors == 2700
    assert sorted(os.listdir(tmp_path / "presized")) == ["docid", "index", "multiview.json"]
    monkeypatch.setattr(PresizedIVFAdds, "prepare", classmethod(lambda cls, *a, **k: None))
    build_index(paths, tmp_path / "plain", index_factory=factory)
    a, b = (faiss.read_index(str(tmp_path / name / "index")) for name in ("presized", "plain"))
    assert a.ntotal == b.ntotal == 2700
    assert faiss.serialize_index(a).tobytes() == faiss.serialize_index(b).tobytes()


def test_non_ivf_and_pretransformed_indexes_are_added_as_usual(tmp_path):
    paths = write_shards(tmp_path / "shards", 1, 200, 2, 16)
    for factory in ("Flat", "HNSW8", "PCA8,IVF4,Flat"):
        index = make_faiss_index(16, factory)
        assert PresizedIVFAdds.prepare(index, paths, tmp_path / "assign") is None
    meta = build_index(paths, tmp_path / "pca", index_factory="PCA8,IVF4,Flat")
    assert meta.num_vectors == 400 and faiss.read_index(str(tmp_path / "pca" / "index")).ntotal == 400


PEAK = """
import json, sys
from pathlib import Path
import faiss
from multiview_plugin.index.adds import PresizedIVFAdds
from multiview_plugin.index.build import build_index
faiss.omp_set_num_threads(1)
if sys.argv[2] == "plain":
    PresizedIVFAdds.prepare = classmethod(lambda cls, *a, **k: None)
def kb(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))
base = kb("VmRSS:")
paths = sorted(Path(sys.argv[1]).glob("corpus.*.pkl"))
out = Path(sys.argv[1]) / sys.argv[2]
build_index(paths, out, index_factory="IVF1,SQ8", train_size=4096)
print(json.dumps({"peak": (kb("VmHWM:") - base) * 1024, "index": (out / "index").stat().st_size}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_presized_ivf_build_peaks_below_faiss_growth(tmp_path):
    """One IVF list of 9 x 65,536 SQ8 vectors (38 MB of codes): Faiss's ``add`` grows it by doubling, and the
    copy at its last doubling (32 MB -> 64 MB) holds both buffers; sized first, the build's peak RSS is lower by
    at least 30% of the index (measured: 24 MB lower for a 40.5 MB index file)."""
    write_shards(tmp_path, 9, 8192, 8, 64, dtype="float16")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = {}
    for mode in ("presized", "plain"):
        out = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path), mode], capture_output=True, text=True,
                             env=env, check=True)
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["presized"]["index"] == runs["plain"]["index"]
    assert runs["plain"]["peak"] - runs["presized"]["peak"] >= 0.3 * runs["presized"]["index"], runs
