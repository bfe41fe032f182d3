"""Tests of multiview_plugin/index/build.py: ``IndexConfig`` (typed, checked when made) and ``build_index`` taking
it or the keyword arguments it took before the config existed, with the same index either way."""

from __future__ import annotations

import dataclasses
import json

import faiss
import pytest

from multiview_plugin.errors import ConfigError
from multiview_plugin.index import IndexConfig, IndexMeta
from multiview_plugin.index import build_index as exported_build_index
from multiview_plugin.index.build import build_index
from multiview_plugin.search import build_index as search_build_index
from tests.index.test_adds import write_shards


def test_config_defaults_are_the_documented_ones():
    config = IndexConfig()
    assert (config.index_factory, config.aggregation, config.train_size, config.seed) == ("Flat", None, 262_144, 42)
    assert (config.rescore_store, config.ivf_training, config.store_dtype) == ("none", "flat", None)
    assert IndexConfig(rescore_store="fp16").store_dtype == "float16"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]


@pytest.mark.parametrize("options, message", [
    ({"ivf_training": "kmeans"}, "--ivf_training 'kmeans': expected one of flat, two_level"),
    ({"ivf_training": "two_level", "use_gpu": True}, "trains on the CPU"),
    ({"rescore_store": "fp8"}, "--rescore_store 'fp8': expected one of none, fp16, fp32"),
    ({"hnsw_ef_construction": 0}, "--hnsw_ef_construction must be an integer >= 1 and <= 4096, got 0"),
    ({"hnsw_ef_construction": 10**6}, "--hnsw_ef_construction must be an integer >= 1 and <= 4096"),
    ({"hnsw_ef_construction": 2.5}, "--hnsw_ef_construction must be an integer"),
])
def test_bad_options_are_refused_when_the_config_is_made(options, message):
    with pytest.raises(ConfigError, match=message):
        IndexConfig(**options)


def test_the_exports_are_one_function():
    assert exported_build_index is build_index is search_build_index


def test_a_config_and_the_keyword_arguments_build_the_same_index(tmp_path):
    paths = write_shards(tmp_path / "shards", 2, 150, 3, 8)
    options = {"index_factory": "IVF4,SQ8", "train_size": 400, "seed": 7, "aggregation": "max"}
    by_config = build_index(paths, tmp_path / "config", IndexConfig(**options))
    by_kwargs = build_index(paths, tmp_path / "kwargs", **options)
    # keyword arguments take the place of the config's fields
    mixed = build_index(paths, tmp_path / "mixed", IndexConfig(index_factory="Flat", seed=7, aggregation="max"),
                        index_factory="IVF4,SQ8", train_size=400)
    read = [faiss.serialize_index(faiss.read_index(str(tmp_path / name / "index"))).tobytes()
            for name in ("config", "kwargs", "mixed")]
    assert read[0] == read[1] == read[2]
    assert by_config == by_kwargs == mixed
    assert IndexMeta.load(tmp_path / "config") == by_config
    assert json.loads((tmp_path / "config" / "multiview.json").read_text())["index_factory"] == "IVF4,SQ8"


def test_unknown_options_and_a_positional_factory_are_type_errors(tmp_path):
    paths = write_shards(tmp_path / "shards", 1, 10, 2, 8)
    with pytest.raises(TypeError, match="unexpected keyword argument 'index_factroy'"):
        build_index(paths, tmp_path / "x", index_factroy="Flat")
    with pytest.raises(TypeError, match="config must be an IndexConfig"):
        build_index(paths, tmp_path / "y", "Flat")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_stage_that_fails_leaves_nothing_beside_the_folder(tmp_path):
    """The set-up stage refuses a document index that needs training after the build's folder was made beside
    ``index_dir``: it is removed, and ``index_dir`` never appears."""
    paths = write_shards(tmp_path / "shards", 1, 20, 2, 8)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match="needs training"):
        build_index(paths, out / "idx", IndexConfig(doc_index_factory="IVF2,Flat"))
    assert sorted(p.name for p in out.iterdir()) == []


@pytest.mark.parametrize("factory, doc_factory", [("HNSW8", None), ("HNSW8,SQ8", None), ("IVF8_HNSW8,Flat", None),
                                                  ("Flat", "HNSW8")])
def test_every_hnsw_graph_is_built_with_the_beam_and_the_file_keeps_it(tmp_path, factory, doc_factory):
    """--hnsw_ef_construction reaches every graph of the build (the index's, an IVF's HNSW quantiser, the document
    index) before anything is added, and the written files hold it (Faiss stores efConstruction)."""
    from multiview_plugin.index.faiss_build import hnsw_graphs

    shards = write_shards(tmp_path / "emb", 1, 300, 2, 16)
    build_index(shards, tmp_path / "ix", IndexConfig(index_factory=factory, doc_index_factory=doc_factory,
                                                    hnsw_ef_construction=77, train_size=600))
    files = ["index"] if doc_factory is None else ["doc_index"]
    for name in files:
        owner = faiss.read_index(str(tmp_path / "ix" / name))
        graphs = hnsw_graphs(owner)
        assert graphs and all(g.hnsw.efConstruction == 77 for g in graphs), name


def test_a_beam_for_a_build_without_a_graph_is_one_line(tmp_path):
    shards = write_shards(tmp_path / "emb", 1, 50, 2, 8)
    with pytest.raises(ConfigError, match=r"--hnsw_ef_construction 100: --index_factory 'Flat' has no HNSW graph"):
        build_index(shards, tmp_path / "ix", IndexConfig(hnsw_ef_construction=100))
    assert not (tmp_path / "ix").exists() and not list(tmp_path.glob(".ix.*"))


def test_a_document_index_beside_hasans_aggregation_warns(tmp_path, caplog):
    """dcsr's HasAns takes no candidates from a document index (its searcher scans every view), so a document index
    it would never read is named at build time; with max aggregation nothing is said."""
    shards = write_shards(tmp_path / "emb", 1, 40, 2, 8)
    with caplog.at_level("WARNING"):
        build_index(shards, tmp_path / "h", doc_index_factory="HNSW8", aggregation="hasans")
    assert any("the document index (--doc_index_factory HNSW8) serves max aggregation" in r.message
               for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING"):
        build_index(shards, tmp_path / "m", doc_index_factory="HNSW8", aggregation="max")
    assert not any("document index" in r.message for r in caplog.records)
