"""Recipes: every config parses into the drivers' arguments, and a recipe runs end to end in smoke mode."""

import importlib.util
import json
from pathlib import Path

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments, MultiViewTrainingArguments
from multiview_plugin.cli import parse_dataclasses
from multiview_plugin.driver.encode import EncodeArguments
from multiview_plugin.encoding.doc2query import GenerateArguments

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
spec = importlib.util.spec_from_file_location("recipes_run", RECIPES / "run.py")
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

ALL = [(b, m) for b in run.BENCHMARKS for m in run.methods_of(b)]


def test_every_benchmark_has_recipes_and_a_readme():
    for benchmark in run.BENCHMARKS:
        assert run.methods_of(benchmark), benchmark
        assert (RECIPES / benchmark / "README.md").is_file(), benchmark
    assert ("msmarco", "dce") in ALL and ("squad", "dcsr") in ALL and ("nq", "mvr") in ALL
    assert ("beir", "dcsr") in ALL and ("beir", "dce") in ALL  # the README's recommended method has its BEIR recipe


def test_beir_dcsr_recipe_is_dcsr_mean():
    train = run.load_recipe("beir", "dcsr")["train"]
    assert (train["model_name"], train["dcsr_sentence_pooling"], train["pooling"]) == ("dcsr", "mean", "mean")


@pytest.mark.parametrize("bench_name,method", ALL, ids=[f"{b}-{m}" for b, m in ALL])
def test_recipe_options_are_valid_driver_flags(bench_name, method, tmp_path):
    recipe = run.load_recipe(bench_name, method)
    assert recipe["target"] and recipe["gpus"] and recipe["expected_time"]
    train = {**recipe["train"], "dataset_path": "train.jsonl", "output_dir": str(tmp_path)}
    model_args, data_args, training_args = parse_dataclasses(
        (ModelArguments, DataArguments, MultiViewTrainingArguments), run.flags(train))
    assert model_args.model_name == method
    encode = {**recipe["encode"], "model_name_or_path": "m", "dataset_path": "c", "encode_output_path": "e"}
    parse_dataclasses((EncodeArguments,), run.flags(encode))
    if "generate" in recipe:
        parse_dataclasses((GenerateArguments,), run.flags({**recipe["generate"], "corpus_path": "c", "output": "o"}))


def test_flags():
    assert run.flags({"a": 1, "b": True, "c": False, "d": [1, 2], "e": None}) == ["--a", "1", "--b", "--d", "1", "2"]


def test_smoke_recipe_runs_and_writes_results(tmp_path, capsys):
    assert run.main(["squad", "dcsr", "--smoke", "--output_dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["benchmark"] == "squad" and results["method"] == "dcsr" and results["smoke"]
    assert set(results["results"]["squad-test"]) == {"Top5", "Top20", "Top100"}
    assert any("multiview_plugin.driver.train" in c for c in results["commands"])
    # the dry run prints the same commands without running anything
    capsys.readouterr()
    assert run.main(["msmarco", "dce", "--smoke", "--dry_run", "--output_dir", str(tmp_path / "dry")]) == 0
    printed = capsys.readouterr().out
    assert "multiview_plugin.driver.generate_queries" in printed and "--pseudo_queries_path" in printed
    assert not (tmp_path / "dry" / "results.json").exists()


def test_hub_corpus_export_and_beir_download(tmp_path, monkeypatch):
    # a local folder stands in for a hub dataset (same datasets.load_dataset call)
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "corpus.jsonl").write_text('{"docid": "d1", "title": "T", "text": "x"}\n{"docid": "d2", "title": "", '
                                      '"text": "y"}\n')
    out = run.export_hub_corpus(str(hub), tmp_path / "data" / "corpus.jsonl")
    assert [json.loads(x)["docid"] for x in out.read_text().splitlines()] == ["d1", "d2"]
    # BEIR's zip (a local file stands in for the server): unpacked once, complete folders only
    import zipfile

    src = tmp_path / "served.zip"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("tiny/corpus.jsonl", '{"_id": "a", "text": "t"}\n')
        z.writestr("tiny/queries.jsonl", '{"_id": "q", "text": "t"}\n')
    calls = []
    monkeypatch.setattr("urllib.request.urlretrieve", lambda url, path: calls.append(url) or
                        Path(path).write_bytes(src.read_bytes()))
    folder = run.download_beir("tiny", tmp_path / "beir")
    assert (folder / "corpus.jsonl").is_file() and calls == [run.BEIR_URL.format("tiny")]
    assert run.download_beir("tiny", tmp_path / "beir") == folder and len(calls) == 1
