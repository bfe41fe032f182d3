"""tools.reporting.prose: numbers in README.md and every docs page carry the record or log they quote
and equal it; a wrong number, a wrong table cell, a broken tag or an untagged number anywhere is caught."""

from pathlib import Path

import pytest

from tools.reporting import prose, records, sources

ROOT = Path(__file__).resolve().parents[3]
# the tagged text of each page: its source under pages/ where it has one (tools/reporting/sources.py)
PAGES = [str(sources.source_of(ROOT / p).relative_to(ROOT))
         for p in ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]]


def test_prose_numbers_match_their_records():
    assert prose.check() == []


def test_check_covers_the_readme_and_every_docs_page():
    assert sorted(str(p.relative_to(ROOT)) for p in prose.PAGES) == sorted(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_every_decimal_of_every_page_is_tagged(page):
    """Issue 31: prose numbers disagreed between pages (training.md's 600-step +1.1 against the README's +1.0;
    mlr-sc-mean +0.8 against +0.7). Every decimal of README.md and of every docs page quotes a record, a log
    (inline or in a ``<!-- logs: -->`` block), a paper, or is a setting."""
    assert prose.untagged((ROOT / page).read_text(encoding="utf-8")) == []


def test_a_wrong_number_or_a_broken_tag_is_caught():
    tag = "<!-- record: scifact-mv:dpr | nDCG@10 -->"
    assert prose.check_text(f"dpr reaches 71.9{tag} nDCG@10", "x.md") == []
    assert prose.check_text(f"dpr reaches **71.9**{tag}", "x.md") == []
    wrong = prose.check_text(f"line one\ndpr reaches 72.0{tag}", "x.md")
    assert len(wrong) == 1 and wrong[0].startswith("x.md:2: is 72.0, the record gives 71.94")
    assert "no record 'nope'" in prose.check_text("1.0<!-- record: nope:dpr | R@1 -->", "x.md")[0]
    assert "has no row 'dcsr'" in prose.check_text("1.0<!-- record: scifact-mv:dcsr | R@1 -->", "x.md")[0]
    assert "has no 'bogus'" in prose.check_text("1.0<!-- record: scifact-mv:dpr | bogus -->", "x.md")[0]
    assert "need an aggregate" in prose.check_text(
        "1.0<!-- record: scifact-mv:dpr, scifact-seed7:dpr-seed7 | nDCG@10 -->", "x.md")[0]
    assert "not in bench/viewer_similarity.log" in prose.check_text(
        "0.5<!-- log: bench/viewer_similarity.log -->", "x.md")[0]
    # 0.3186 rounded, on the log's line of the viewers' cosine (the sentence names its place)
    assert prose.check_text("distinct viewers: cosine 0.32<!-- log: bench/viewer_similarity.log -->", "x.md") == []


def test_aggregates_and_paired_tests():
    two = "scifact-mv:dpr, scifact-seed7:dpr-seed7"
    a = records.load_record("scifact-mv")["rows"][0]["nDCG@10"]
    b = next(r for r in records.load_record("scifact-seed7")["rows"] if r["system"] == "dpr-seed7")["nDCG@10"]
    assert prose.value(f"{two} | nDCG@10 | mean") == pytest.approx((a + b) / 2)
    assert prose.value(f"{two} | nDCG@10 | diff") == pytest.approx(a - b)
    assert prose.value(f"{two} | nDCG@10 | max") == max(a, b)
    # a p-value the run did not record: computed from the per-question ranks against dpr of its setting and seed
    assert prose.value("squad-sel600-mvr-residual-rerun:mvr-residual-600 | p_value") == pytest.approx(0.0112, abs=1e-4)
    assert prose.check_text("p = 0.011<!-- record: squad-sel600-mvr-residual-rerun:mvr-residual-600 | p_value -->",
                            "x.md") == []


def test_a_p_at_its_tests_floor_is_written_as_a_bound():
    """p = 1/(N+1) says only that none of N sign flips was as extreme: the prose must say ``< 0.0001``."""
    tag = "<!-- record: squad-sel300-gpu-mvr-viseg:mvr-residual-300-viseg | p_value -->"
    wrong = prose.check_text(f"a win (p = 0.0001{tag})", "x.md")
    assert wrong == ["x.md:1: is 0.0001, the floor of its test (10000 sign flips): write < 0.0001"]
    assert prose.check_text(f"a win (p < 0.0001{tag})", "x.md") == []
    assert prose.check_text(f"+9.1 (< 0.0001{tag})", "x.md") == []
    # a p above the floor is written as measured
    assert prose.check_text("p = 0.011<!-- record: squad-sel600-mvr-residual-rerun:mvr-residual-600 | p_value -->",
                            "x.md") == []


def test_dev_curve_fields():
    """``dev@STEP`` / ``dev@best`` read the row's dev curve (a fraction) as %; a step the curve lacks is an error."""
    spec = "squad-sel-dpr:dpr | dev@{}"
    curve = dict(records.load_record("squad-sel-dpr")["rows"][0]["curves"]["dev"])
    assert prose.value(spec.format(75)) == pytest.approx(100 * curve[75])
    assert prose.value(spec.format("best")) == pytest.approx(100 * max(curve.values()))
    assert prose.check_text(f"77.38<!-- record: {spec.format(100)} -->", "x.md") == []
    assert "is 77.4" in prose.check_text(f"77.4<!-- record: {spec.format(75)} -->", "x.md")[0]
    assert "has no 'dev@60'" in prose.check_text(f"77.4<!-- record: {spec.format(60)} -->", "x.md")[0]


def test_untagged_skips_code_generated_tables_and_settings():
    text = ("a 1.5 here and 2.5<!-- setting --> there, `--temperature 0.05`, CC BY 4.0, §5.2\n```\n9.9\n```\n"
            "<!-- results:start -->\n| 7.7 |\n<!-- results:end -->\n| 3.3 |\n")
    assert prose.untagged(text) == [(1, "1.5"), (8, "3.3")]


def test_a_logs_block_checks_every_cell(tmp_path, monkeypatch):
    """A table between ``<!-- logs: FILES -->`` and ``<!-- /logs -->``: every decimal must be in one of the files,
    as written or rounded to the written precision; a wrong cell is reported with its page and line."""
    monkeypatch.setattr(prose.rec, "ROOT", tmp_path)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "a.log").write_text("# command: python bench/a.py\nrecall 0.99453 at 1.234 ms\n")
    (tmp_path / "bench" / "b.json").write_text('{"ratio": -4.47}')
    table = ("| set | recall | ms | delta |\n|---|---|---|---|\n| syn | {} | 1.23 | −4.5 |\n")
    page = "intro 1.5<!-- setting -->\n\n<!-- logs: bench/a.log, bench/b.json -->\n" + table + "<!-- /logs -->\n"
    assert prose.check_text(page.format("0.9945"), "x.md") == []
    assert prose.check_text(page.format("0.99453"), "x.md") == []
    assert prose.untagged(page.format("0.9945")) == []  # the block's numbers are checked, not untagged
    assert prose.check_text(page.format("0.9946"), "x.md") == ["x.md:6: 0.9946 is not in bench/a.log, bench/b.json"]
    assert prose.check_text(page.format("0.9945").replace("| 1.23 |", "| 1.3 |"), "x.md") == [
        "x.md:6: 1.3 is not in bench/a.log, bench/b.json"]
    # a missing file, an unclosed or an unopened block
    assert prose.check_text("<!-- logs: bench/nope.log -->\n0.5\n<!-- /logs -->\n", "x.md") == [
        "x.md:1: no log bench/nope.log"]
    assert "not closed" in prose.check_text("<!-- logs: bench/a.log -->\n0.99\n", "x.md")[0]
    assert "without an opening" in prose.check_text("0.99\n<!-- /logs -->\n", "x.md")[0]
    # outside a block the same decimal is untagged
    assert prose.untagged(table.format("0.9945")) == [(3, "0.9945"), (3, "1.23"), (3, "−4.5")]


def test_index_megabytes_papers_and_tags_inside_code():
    """``index_MB`` is the results tables' "index MB" column (recorded ``index_bytes``, else vectors x dim x 4);
    a paper's number carries ``<!-- paper: ... -->``; a tag inside a code span (which renders as text) is caught."""
    assert prose.value("squad-sel-colbert-pylate:colbert-pylate | index_MB") == pytest.approx(138.725376)
    assert prose.check_text("14.7<!-- record: squad-sel-dcsr-mean:dcsr-mean | index_MB --> MB", "x.md") == []
    assert "is 3.3" in prose.check_text("3.3<!-- record: squad-sel-dpr:dpr | index_MB -->", "x.md")[0]
    assert prose.untagged("PPL 1.02<!-- paper: Zhang et al. 2022 (MVR), Table 6 -->, ODC-By 1.0") == []
    found = prose.check_text("run `--temperature 0.1<!-- setting -->\n --x` now", "x.md")
    assert len(found) == 1 and found[0].startswith("x.md:1: a tag inside a code span")


LOG = ("# command: python bench/ann.py\n"
       "syn-8views-d128  HNSW32   recall@10 0.954  latency 12.31 ms\n"
       "syn-wide-d96     IVF1024  recall@10 0.989  latency 3.27 ms\n"
       "syn-tight-d32    IVF256   recall@10 0.971  latency 2.05 ms\n"
       "syn-mixed-d64    Flat     recall@10 1.000  latency 40.2 ms\n")
JSON_LOG = '{\n  "qdrant": {\n    "build_s": 41.7\n  },\n  "faiss": {\n    "build_s": 12.31\n  }\n}\n'


def test_a_log_number_is_checked_in_its_own_place(tmp_path, monkeypatch):
    """A tagged log number must be where the page's sentence puts it (issue 36): the same number replaced by
    another number of the same log, from another row, fails; a label in the tag binds a sentence that names none."""
    monkeypatch.setattr(prose.rec, "ROOT", tmp_path)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "ann.log").write_text(LOG)
    (tmp_path / "bench" / "build.json").write_text(JSON_LOG)
    tag = "<!-- log: bench/ann.log -->"
    assert prose.check_text(f"HNSW32 keeps 0.954{tag} of exact top-10 at 12.3{tag} ms.\n", "x.md") == []
    # 0.989 is in the log, but in the IVF row: replaced by another row's number
    wrong = prose.check_text(f"HNSW32 keeps 0.989{tag} of exact top-10.\n", "x.md")
    assert len(wrong) == 1 and wrong[0].startswith("x.md:1: 0.989 is in bench/ann.log, but on no line that shares")
    assert prose.check_text(f"HNSW32 answers in 3.27{tag} ms.\n", "x.md")[0].startswith("x.md:1: 3.27 is in")
    # a number that is nowhere in the log, as before
    assert prose.check_text(f"HNSW32 keeps 0.955{tag}.\n", "x.md") == ["x.md:1: 0.955 is not in bench/ann.log"]
    # the sentence names no label: the tag does (a JSON object's key a line or two above counts)
    assert prose.check_text("Building took 41.7<!-- log: bench/build.json | qdrant --> s.\n", "x.md") == []
    assert prose.check_text("Building took 12.31<!-- log: bench/build.json | qdrant --> s.\n", "x.md") == [
        "x.md:1: 12.31 is in bench/build.json, but on no line with 'qdrant' (or two lines below one)"]


def test_a_page_that_is_not_there_is_one_line(capsys):
    from tools.reporting.__main__ import main

    assert main(["check", "--prose", "no_such_page.md"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "error: no such page: no_such_page.md\n"
    assert prose.check([ROOT / "no_such_page.md"]) == ["no_such_page.md: no such page"]
