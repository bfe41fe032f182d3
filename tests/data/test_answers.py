"""QA answers (data/answers.py): DPR's answer matcher (tokens, regex, lenient) and reading answers and DPR topics."""

from __future__ import annotations

import pytest

from multiview_plugin.data.answers import has_answer, load_answers, load_qa, normalize_answer
from multiview_plugin.data.readers import InputFormatError
from tests.conftest import shared_data_dir


def test_normalize_answer():
    assert normalize_answer("  The Eiffel   Tower! ") == "eiffel tower"
    assert normalize_answer("an Apple, a day.") == "apple day"


def test_has_answer_tokens():
    assert has_answer(["eiffel tower"], "The Eiffel Tower! was built in 1889.")
    assert has_answer(["nothing", "EIFFEL Tower"], "the eiffel tower")
    assert not has_answer(["art"], "They had a party.")
    assert has_answer(["art"], "Modern art, mostly.")
    assert not has_answer(["eiffel tower"], "the tower of eiffel")
    assert has_answer(["May 18 , 2018"], "released on May 18, 2018 worldwide")
    assert not has_answer([""], "anything")
    assert not has_answer([], "anything")
    # unicode: NFC vs NFD spellings match each other, accents are not dropped
    assert has_answer(["Wilhelm Conrad Röntgen"], "won by Wilhelm Conrad Ro\u0308ntgen in 1901")
    assert not has_answer(["Rontgen"], "Wilhelm Röntgen")
    assert has_answer(["東京"], "首都は 東京 です")
    # DPR keeps articles and punctuation; the lenient mode drops them
    assert not has_answer(["the U.S. army"], "a US army unit")
    assert has_answer(["the U.S. army"], "a U S army unit", lenient=True)


def test_has_answer_regex():
    pattern = r"20\s?,?\s?(32|40)0\s?-?\s?f(ee|oo)t|6,194-meter"
    assert has_answer([pattern], "Mount McKinley is 20,320 FEET high", regex=True)
    assert has_answer(["nope", pattern], "a 6,194-meter peak", regex=True)
    assert not has_answer([pattern], "it is 19,000 feet", regex=True)
    assert not has_answer(["(unclosed"], "(unclosed", regex=True)  # invalid regex: no match, no error
    assert has_answer(["^second line"], "first\nsecond line", regex=True)  # multiline


def test_load_answers(tmp_path):
    jsonl = tmp_path / "eval_answers.jsonl"
    jsonl.write_text('{"query_id": "56be4db0", "answers": ["Denver Broncos"]}\n{"query_id": 7, "answers": "x"}\n')
    assert load_answers(jsonl) == {"56be4db0": ["Denver Broncos"], "7": ["x"]}
    dpr = tmp_path / "topics.dpr.test.txt"
    dpr.write_text("who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\n"
                   "which mode is used\t['Olivia', 'MFSK']\n", encoding="utf-8")
    questions, answers = load_qa(dpr)
    assert questions == {"0": "who got the first nobel prize in physics", "1": "which mode is used"}
    assert answers == {"0": ["Wilhelm Conrad Röntgen"], "1": ["Olivia", "MFSK"]}
    curated = tmp_path / "curated.txt"
    curated.write_text('{"question": "How tall?", "answer": ["20,?320 feet"]}\n')
    assert load_qa(curated) == ({"0": "How tall?"}, {"0": ["20,?320 feet"]})
    jsonl.write_text('{"query_id": "a", "answers": [1]}\n')
    with pytest.raises(InputFormatError, match="line 1: field 'answers'"):
        load_answers(jsonl)


def test_load_real_dpr_topics():
    data = shared_data_dir()
    path = data / "anserini" / "topics" / "topics.dpr.curated.test.txt" if data else None
    if path is None or not path.is_file():
        pytest.skip("shared data not available")
    questions, answers = load_qa(path)
    assert list(questions)[:2] == ["0", "1"] and questions["0"] == "How tall is Mount McKinley?"
    assert has_answer(answers["0"], "Denali rises 20,320 feet above sea level", regex=True)
