"""The Python API (multiview_plugin.api) and the README's Python example, run as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from multiview_plugin import MultiViewModel
from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.registry import get_encoder_class

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def save_model(name: str, backbone: Path, folder: Path, **flags) -> Path:
    model = get_encoder_class(name).build(ModelArguments(model_name_or_path=str(backbone), model_name=name, **flags),
                                          DataArguments())
    model.save(folder)
    return folder


@pytest.fixture(scope="module")
def dcsr_mean(tiny_bert, tmp_path_factory) -> Path:
    """A tiny random model saved as the README's end-to-end block trains it (dcsr, mean-pooled sentences)."""
    return save_model("dcsr", tiny_bert, tmp_path_factory.mktemp("runs") / "dcsr-mean", pooling="mean",
                      normalize=True, temperature=0.05, dcsr_sentence_pooling="mean")


def test_readme_python_example_runs_as_written(dcsr_mean, tmp_path, monkeypatch, capsys):
    (example,) = python_blocks(README)
    assert len(example.strip().splitlines()) <= 15
    assert '"runs/dcsr-mean"' in example  # the folder the README's train step writes
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "dcsr-mean").symlink_to(dcsr_mean, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, str(README), "exec"), {"__name__": "readme_example"})
    printed = capsys.readouterr().out
    assert "(1, 32) [(2, 32), (1, 32)] d" in printed  # dcsr: one view per sentence
    assert (tmp_path / "indexes" / "python-demo" / "multiview.json").is_file()


def test_docs_page_examples_run(dcsr_mean, tiny_bert, tmp_path, monkeypatch):
    """docs/python-api.md's examples, with its folders standing for tiny models."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "dcsr-mean").symlink_to(dcsr_mean, target_is_directory=True)
    save_model("mvr", tiny_bert, tmp_path / "runs" / "mvr", mvr_num_views=3)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_example"}
    for block in python_blocks(DOCS):
        exec(compile(block, str(DOCS), "exec"), namespace)


def test_encode_documents_matches_the_encode_driver(tiny_bert, tmp_path):
    """encode_documents gives each document the rows the encode driver writes for it (views per document)."""
    from multiview_plugin.driver.encode import main as encode_main
    from multiview_plugin.encoding.shards import read_shard

    folder = save_model("mvr", tiny_bert, tmp_path / "mvr", mvr_num_views=3)
    texts = ["paris is the capital of france", "the moon is small", "a cat and a dog"]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"docid": "d{i}", "text": "{t}"}}\n' for i, t in enumerate(texts)))
    assert encode_main(["--model_name_or_path", str(folder), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "emb.pkl"), "--device", "cpu"]) == 0
    reps, lookup, _ = read_shard(tmp_path / "emb.pkl")
    model = MultiViewModel.load(folder, device="cpu")
    views = model.encode_documents(texts, batch_size=2)
    assert [v.shape for v in views] == [(3, 32)] * 3
    for i, v in enumerate(views):
        rows = [j for j, name in enumerate(lookup) if name.split("#")[0] == f"d{i}"]
        np.testing.assert_allclose(v, reps[rows], atol=1e-5)
    queries = model.encode_queries(["where is paris", "what is the moon"])
    assert queries.shape == (2, 32) and queries.dtype == np.float32


def test_load_overrides_a_shared_text_option(tiny_bert, tmp_path):
    folder = save_model("dpr", tiny_bert, tmp_path / "dpr", normalize=True)
    normed = MultiViewModel.load(folder, device="cpu").encode_queries(["where is paris"])
    raw = MultiViewModel.load(folder, device="cpu", normalize=False).encode_queries(["where is paris"])
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, atol=1e-5)
    assert abs(float(np.linalg.norm(raw)) - 1.0) > 1e-3
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), normed, atol=1e-5)


def test_index_ranks_by_the_models_max_over_views(tiny_bert, tmp_path):
    folder = save_model("mvr", tiny_bert, tmp_path / "mvr", mvr_num_views=3)
    model = MultiViewModel.load(folder, device="cpu")
    docs = {"a": "paris is the capital of france", "b": "the moon is small", "c": "a cat and a dog"}
    searcher = model.index(docs, tmp_path / "idx")
    hits = searcher.search("where is paris", k=3)
    q = model.encode_queries(["where is paris"])[0]
    expected = {d: float((v @ q).max()) for d, v in zip(docs, model.encode_documents(list(docs.values())))}
    assert [h.docid for h in hits] == sorted(expected, key=expected.get, reverse=True)
    np.testing.assert_allclose([h.score for h in hits], sorted(expected.values(), reverse=True), rtol=1e-4)
