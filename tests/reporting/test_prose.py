"""multiview_plugin.reporting.prose: numbers in README.md, docs/results.md and docs/training.md carry the record they
quote and equal it; a wrong number, a broken tag or an untagged number in the README is caught."""

from pathlib import Path

import pytest

from multiview_plugin.reporting import prose, records

ROOT = Path(__file__).resolve().parents[2]
# docs/results.md's prose decimals that carry no tag yet (its tables are generated and checked): may only shrink
RESULTS_PAGE_UNTAGGED = 7


def test_prose_numbers_match_their_records():
    assert prose.check() == []


@pytest.mark.parametrize("page", ["README.md", "docs/training.md"])
def test_every_decimal_of_the_readme_and_training_page_is_tagged(page):
    """Issue 31: prose numbers disagreed between pages (training.md's 600-step +1.1 against the README's +1.0;
    mlr-sc-mean +0.8 against +0.7). Every decimal of these pages quotes a record, a log, or is a setting."""
    assert prose.untagged((ROOT / page).read_text(encoding="utf-8")) == []


def test_the_results_page_has_no_more_untagged_decimals():
    assert len(prose.untagged((ROOT / "docs" / "results.md").read_text(encoding="utf-8"))) <= RESULTS_PAGE_UNTAGGED


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
    assert prose.check_text("0.32<!-- log: bench/viewer_similarity.log -->", "x.md") == []  # 0.3186 rounded


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
