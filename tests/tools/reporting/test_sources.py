"""tools.reporting.sources: a published page is its source under pages/ without the number tags; an edit of the
published page (or a stale one) is caught, naming the source to edit."""

from pathlib import Path

from tools.reporting import pages, prose, records, sources

ROOT = Path(__file__).resolve().parents[3]


def test_strip_removes_number_tags_and_log_block_markers_only():
    text = ("dpr reaches 71.9<!-- record: scifact-mv:dpr | nDCG@10 --> nDCG@10 (p < 0.05<!-- setting -->), "
            "as 4.85<!-- log: bench/view_ppl_ceiling.log --> says; 12.3<!-- paper: Zhang 2022, Table 2 -->\n"
            "<!-- logs: bench/a.log -->\n| a | 0.99 |\n<!-- /logs -->\n"
            "<!-- headline:start -->\n| t |\n<!-- headline:end -->\n")
    assert sources.strip(text) == ("dpr reaches 71.9 nDCG@10 (p < 0.05), as 4.85 says; 12.3\n| a | 0.99 |\n"
                                   "<!-- headline:start -->\n| t |\n<!-- headline:end -->\n")


def test_a_tag_shown_in_a_code_span_stays():
    line = "write `7.1<!-- record: r:s | f -->` after a number: 7.1<!-- record: r:s | f --> is checked\n"
    assert sources.strip(line) == "write `7.1<!-- record: r:s | f -->` after a number: 7.1 is checked\n"


def test_every_published_page_is_its_sources_rendering_and_has_no_number_tag():
    assert sources.published(write=False) == []
    for src in sources.sources():
        page = sources.published_of(src).read_text(encoding="utf-8")
        assert sources.INLINE.search(page) is None and "<!-- logs:" not in page, src


def test_source_mapping(tmp_path):
    for src in sources.sources():
        assert sources.source_of(sources.published_of(src)) == src
    assert sources.source_of(tmp_path / "x.md") == (tmp_path / "x.md").resolve()  # outside the repository
    assert sources.source_of(ROOT / "docs" / "no-such-page.md") == (ROOT / "docs" / "no-such-page.md").resolve()
    assert set(prose.PAGES) >= set(sources.sources())  # the sources' tags are what the prose check reads


def test_an_edited_published_page_is_caught(monkeypatch, tmp_path):
    src_root, root = tmp_path / "pages", tmp_path
    (src_root / "docs").mkdir(parents=True)
    (src_root / "docs" / "x.md").write_text("a 1.5<!-- setting --> b\n", encoding="utf-8")
    (root / "docs").mkdir(exist_ok=True)
    monkeypatch.setattr(sources, "SOURCES", src_root)
    monkeypatch.setattr(records, "ROOT", root)
    sources.published(write=True)
    assert (root / "docs" / "x.md").read_text(encoding="utf-8") == "a 1.5 b\n"
    assert pages.stale_published() == []
    (root / "docs" / "x.md").write_text("a 2.5 b\n", encoding="utf-8")
    stale = pages.stale_published()
    assert len(stale) == 1 and stale[0].startswith("x.md:1: is 'a 2.5 b'") and "edit pages/docs/x.md" in stale[0]
