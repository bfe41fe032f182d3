"""DPR biencoder json → Tevatron train jsonl, streamed object by object."""

import json

import pytest

from multiview_plugin.data.dpr import convert_dpr_biencoder, iter_json_array
from multiview_plugin.data.readers import InputFormatError, iter_train_records

RECORDS = [
    {"question": "who wrote hamlet", "answers": ["Shakespeare"],
     "positive_ctxs": [{"title": "Hamlet", "text": "Hamlet is a play by Shakespeare.", "passage_id": "11"}],
     "negative_ctxs": [{"title": "Rome", "text": "Rome is in Italy.", "passage_id": "12"}],
     "hard_negative_ctxs": [{"title": "Macbeth", "text": "Macbeth is a tragedy.", "passage_id": "13"}]},
    {"question": "no positive here", "answers": ["x"], "positive_ctxs": [], "hard_negative_ctxs": []},
    {"question": "where is paris ", "answers": ["France"],
     "positive_ctxs": [{"title": "Paris", "text": "Paris is in France. " * 40, "passage_id": 21}],
     "hard_negative_ctxs": []},
]


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_stream_matches_json_load(tmp_path, chunk):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(RECORDS, indent=2))
    assert [obj for _, obj in iter_json_array(path, chunk_size=chunk)] == RECORDS


def test_convert_writes_tevatron_records(tmp_path):
    src = tmp_path / "biencoder-nq-train.json"
    src.write_text(json.dumps(RECORDS))
    out = tmp_path / "train.jsonl"
    assert convert_dpr_biencoder(src, out) == {"written": 2, "skipped": 1}
    first, second = iter_train_records(out)
    assert first["query"] == "who wrote hamlet" and first["answers"] == ["Shakespeare"]
    assert first["positive_docids"] == ["11"] and first["negative_docids"] == ["13"]
    assert first["positives"] == ["Hamlet Hamlet is a play by Shakespeare."]
    assert second["positive_docids"] == ["21"] and second["negatives"] == []
    convert_dpr_biencoder(src, out, negatives="both")
    assert next(iter_train_records(out))["negative_docids"] == ["13", "12"]


def test_bad_files_fail_with_location(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"question": "ok", "positive_ctxs": [{"text": "t"}]}, {"question": 3}]')
    with pytest.raises(InputFormatError, match=r"\[1\]\.question"):
        convert_dpr_biencoder(bad, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()  # nothing half-written
    torn = tmp_path / "torn.json"
    torn.write_text('[{"question": "a"}, {"question": ')
    with pytest.raises(InputFormatError, match=r"field '\[1\]': invalid JSON"):
        list(iter_json_array(torn, chunk_size=8))
    with pytest.raises(InputFormatError, match="expected a JSON array"):
        list(iter_json_array(_write(tmp_path / "obj.json", "{}")))


def _write(path, text):
    path.write_text(text)
    return path


def test_dpr_converter_without_positives_is_an_error(tmp_path):
    from multiview_plugin.data.dpr import convert_dpr_biencoder
    from multiview_plugin.data.readers import InputFormatError

    src = tmp_path / "biencoder.json"
    src.write_text(json.dumps([{"question": "who", "answers": ["x"], "positive_ctxs": [],
                                "hard_negative_ctxs": [{"title": "t", "text": "x"}]}]))
    with pytest.raises(InputFormatError, match="none of its 1 records has a positive passage"):
        convert_dpr_biencoder(src, tmp_path / "train.jsonl")
    assert not (tmp_path / "train.jsonl").exists()
