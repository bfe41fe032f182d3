"""Tests of multiview_plugin/modeling/config.py: the saved multiview_config.json, every size in it bounded,
one-line errors."""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.config import EncoderConfig
from tests.conftest import one_line_error, write_topics_corpus


def _edited_copy(saved: Path, folder: Path, **edits) -> Path:
    shutil.copytree(saved, folder)
    path = folder / "multiview_config.json"
    data = json.loads(path.read_text())
    for key, value in edits.items():
        if key.startswith("options."):
            data["options"][key.split(".", 1)[1]] = value
        else:
            data[key] = value
    path.write_text(json.dumps(data))
    return folder


def test_saved_config_asking_for_a_billion_views_is_one_line_before_allocating(saved_mvr, tmp_path, capsys,
                                                                                monkeypatch):
    """main: the encoder built 10**9 viewer-token strings (a MemoryError traceback after minutes)."""
    import multiview_plugin.modeling.mvr as mvr

    real = mvr.viewer_tokens

    def guarded(num_views: int) -> list[str]:
        assert num_views <= 1024, f"{num_views} viewer tokens were about to be allocated"
        return real(num_views)

    monkeypatch.setattr(mvr, "viewer_tokens", guarded)
    folder = _edited_copy(saved_mvr, tmp_path / "huge", **{"options.mvr_num_views": 10 ** 9})
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    tracemalloc.start()
    start = time.perf_counter()
    try:
        rc = encode_main(["--model_name_or_path", str(folder), "--dataset_path", str(corpus),
                          "--encode_output_path", str(tmp_path / "c.pkl")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 2
    assert time.perf_counter() - start < 30 and peak < 64 * 2 ** 20
    one_line_error(capsys, str(folder / "multiview_config.json"), "field 'options.mvr_num_views'",
                    ">= 1 and <= 1024", "got 1000000000")
    assert not (tmp_path / "c.pkl").exists()


@pytest.mark.parametrize("field,value,needle", [
    ("options.mvr_num_views", 0, ">= 1 and <= 1024, got 0"),
    ("options.mvr_num_views", "8", "must be an integer >= 1 and <= 1024, got '8'"),
    ("options.mvr_num_views", True, "must be an integer"),
    ("options.mvr_num_views", 8.0, "must be an integer"),
    ("options.mvr_lambda", float("nan"), "must be a finite number >= 0.0"),
    ("options.mvr_lambda", -1.0, "must be >= 0.0, got -1.0"),
    ("passage_max_len", 10 ** 9, "field 'passage_max_len' must be >= 1 and <= 1048576"),
    ("query_max_len", 0, "field 'query_max_len' must be >= 1"),
    ("pad_to_multiple_of", 10 ** 9, "field 'pad_to_multiple_of' must be >= 0 and <= 1024"),
    ("options", [1, 2], "field 'options' must be an object"),
])
def test_every_size_in_a_saved_config_is_bounded(saved_mvr, tmp_path, field, value, needle):
    folder = _edited_copy(saved_mvr, tmp_path / "edited", **{field: value})
    with pytest.raises(ConfigError) as err:
        EncoderConfig.load(folder)
    message = str(err.value)
    assert message.startswith(str(folder / "multiview_config.json")) and needle in message, message
    assert "\n" not in message


@pytest.mark.parametrize("name,options,needle", [
    ("mebert", {"mebert_num_vectors": 10 ** 6}, "field 'options.mebert_num_vectors' must be >= 1 and <= 1024"),
    ("dcsr", {"dcsr_bm25_negatives": 10 ** 6}, "field 'options.dcsr_bm25_negatives' must be >= 0 and <= 1024"),
    ("dcsr", {"dcsr_in_passage_negatives": -1}, "field 'options.dcsr_in_passage_negatives' must be >= 0"),
])
def test_other_methods_sizes_are_bounded(tmp_path, name, options, needle):
    EncoderConfig(model_name=name, backbone="b").save(tmp_path)
    path = tmp_path / "multiview_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "options": options}))
    with pytest.raises(ConfigError, match="^" + str(path)) as err:
        EncoderConfig.load(tmp_path)
    assert needle in str(err.value)


@pytest.mark.parametrize("content,needle", [
    ("[1, 2]", "not a JSON object"),
    ('{"format_version": "2"}', "field 'format_version': expected an integer, got '2'"),
    ('{"format_version": true}', "field 'format_version': expected an integer, got True"),
])
def test_a_malformed_config_is_one_line_not_a_traceback(tmp_path, content, needle):
    """The object check comes before any field is read (a JSON list once raised AttributeError)."""
    (tmp_path / "multiview_config.json").write_text(content)
    with pytest.raises(ConfigError) as err:
        EncoderConfig.load(tmp_path)
    assert needle in str(err.value) and "\n" not in str(err.value)
