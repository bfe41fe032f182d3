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
    """The README's Python example, on a tiny model standing where the quickstart leaves its dcsr-mean model."""
    (example,) = python_blocks(README)
    assert len(example.strip().splitlines()) <= 15
    assert '"runs/quickstart/models/dcsr-mean-zero-shot"' in example  # the folder the quickstart writes
    models = tmp_path / "runs" / "quickstart" / "models"
    models.mkdir(parents=True)
    (models / "dcsr-mean-zero-shot").symlink_to(dcsr_mean, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, str(README), "exec"), {"__name__": "readme_example"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "[(2, 32), (2, 32)]"  # dcsr: one view per sentence, two sentences each
    assert len(printed) == 3 and {line.split()[0] for line in printed[:2]} == {"fl", "fr"}
    assert (tmp_path / "indexes" / "readme-demo" / "multiview.json").is_file()


def test_docs_page_examples_run(dcsr_mean, tiny_bert, tmp_path, monkeypatch):
    """docs/python-api.md's examples, with its folders standing for tiny models."""
    (tmp_path / "runs" / "quickstart" / "models").mkdir(parents=True)  # where the quickstart leaves its models
    (tmp_path / "runs" / "quickstart" / "models" / "dcsr-mean-zero-shot").symlink_to(dcsr_mean,
                                                                                   target_is_directory=True)
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


# --------------------------------------------------------------------------- input types, lengths and ranges

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from multiview_plugin.errors import ConfigError  # noqa: E402


@pytest.fixture(scope="module")
def api_model(tiny_bert, tmp_path_factory) -> MultiViewModel:
    return MultiViewModel.load(save_model("mvr", tiny_bert, tmp_path_factory.mktemp("api") / "mvr",
                                          mvr_num_views=2), device="cpu")


@pytest.fixture(scope="module")
def api_searcher(api_model, tmp_path_factory):
    return api_model.index(["hamlet is a play", "paris is in france", "the sky is blue"],
                           tmp_path_factory.mktemp("api-index") / "idx")


def test_one_string_is_one_text_not_one_text_per_character(api_model):
    """encode_queries("a string") / encode_documents("...") returned one vector per character."""
    q = api_model.encode_queries("who wrote hamlet?")
    assert q.shape == (api_model.encode_queries(["who wrote hamlet?"]).shape[1],)
    np.testing.assert_allclose(q, api_model.encode_queries(["who wrote hamlet?"])[0], rtol=1e-5, atol=1e-6)
    d = api_model.encode_documents("hamlet is a play by shakespeare")
    assert isinstance(d, np.ndarray) and d.ndim == 2 and d.shape[0] == 2  # its two views
    with pytest.raises(TypeError, match="got one str"):
        api_model.index("hamlet is a play", "unused")


@pytest.mark.parametrize("call", ["encode_queries", "encode_documents"])
def test_non_string_items_and_bad_batch_sizes_are_clear_errors(api_model, call):
    """encode_queries([None, 42]) raised a TypeError from string concatenation; batch_size=-1 returned nothing."""
    encode = getattr(api_model, call)
    with pytest.raises(TypeError, match=r"texts\[0\]: expected a str, got NoneType"):
        encode([None, 42])
    with pytest.raises(TypeError, match=r"texts\[1\]: expected a str, got int"):
        encode(["ok", 42])
    for bad in (0, -1):
        with pytest.raises(ValueError, match="batch_size: expected an int >= 1"):
            encode(["a", "b"], batch_size=bad)
    for bad in (1.5, "8", True, None):
        with pytest.raises(TypeError, match="batch_size"):
            encode(["a"], batch_size=bad)


def test_search_depth_must_be_a_positive_whole_number(api_searcher, tmp_path):
    """search(k=0) / k=-1 returned one hit."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match="k: expected an int >= 1"):
            api_searcher.search("who wrote hamlet?", k=bad)
        with pytest.raises(ValueError, match="k: expected an int >= 1"):
            api_searcher.batch_search(["who wrote hamlet?"], ["q0"], k=bad)
    for bad in (2.0, "3", None):
        with pytest.raises(TypeError, match="k: expected an int"):
            api_searcher.search("who wrote hamlet?", k=bad)
    with pytest.raises(TypeError, match="query: expected a str or a vector"):
        api_searcher.search(None)
    with pytest.raises(TypeError, match=r"queries\[1\]: expected a str"):
        api_searcher.batch_search(["ok", 3], ["q0", "q1"])
    assert len(api_searcher.search("who wrote hamlet?", k=2)) == 2
    assert len(api_searcher.search("who wrote hamlet?", k=10**9)) == 3  # capped at the documents


texts_or_not = st.lists(st.one_of(st.text(max_size=12), st.none(), st.integers(), st.floats(), st.binary(max_size=4)),
                        max_size=5)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(texts=st.one_of(st.text(max_size=20), texts_or_not), batch_size=st.integers(-3, 4))
def test_encode_inputs_give_one_row_per_text_or_one_clear_error(api_model, texts, batch_size):
    """Any list of anything and any batch size: one vector per text (a str: one vector), or a TypeError /
    ValueError naming the argument; never a vector per character, nor a silently empty result."""
    try:
        q = api_model.encode_queries(texts, batch_size=batch_size)
    except TypeError as err:
        assert not isinstance(texts, str) and any(not isinstance(t, str) for t in texts), err
        assert "texts[" in str(err)
        return
    except ValueError as err:
        assert batch_size < 1 and "batch_size" in str(err)
        return
    assert batch_size >= 1
    if isinstance(texts, str):
        assert q.ndim == 1
    else:
        assert q.shape[0] == len(texts) and np.isfinite(q).all()


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(k=st.one_of(st.integers(-5, 6), st.floats(-2, 5), st.none(), st.booleans()))
def test_search_depths_give_min_k_documents_or_one_clear_error(api_searcher, k):
    try:
        hits = api_searcher.search("where is paris?", k=k)
    except TypeError:
        assert not isinstance(k, int) or isinstance(k, bool)
        return
    except ValueError:
        assert k < 1
        return
    assert isinstance(k, int) and len(hits) == min(k, 3)


@pytest.mark.parametrize("kind", ["missing", "file", "empty", "junk"])
def test_load_of_what_is_not_a_model_folder_is_one_clear_error(tmp_path, kind):
    """MultiViewModel.load on a missing path, a file or an empty folder: a hub "Repo id must be" error, a JSON
    error or sentencepiece's message."""
    path = tmp_path / kind
    if kind == "file":
        path.write_text("not a model\n")
    elif kind in ("empty", "junk"):
        path.mkdir()
        if kind == "junk":
            (path / "notes.txt").write_text("x\n")
    with pytest.raises(ConfigError) as err:
        MultiViewModel.load(path)
    message = str(err.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert "multiview_config.json" in message and "config.json" in message
    assert {"missing": "no such folder", "file": "is a file", "empty": "an empty folder",
            "junk": "holds neither"}[kind] in message
