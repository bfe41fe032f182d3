"""Tests mirror the package (docs/layout.md#tests): the tests of ``multiview_plugin/<folder>/<module>.py`` (or
``_<module>.py``) are in ``tests/<folder>/test_<module>.py``, a top-level module's in ``tests/test_<module>.py``.
The repository's tools (``tools/``, not installed) are mirrored the same way under ``tests/tools/``:
``tools/reporting/prose.py`` → ``tests/tools/reporting/test_prose.py``. Suites that cross modules stay where they
are (``tests/reliability/``, ``tests/e2e/``, ``tests/interop/``, and topic files beside the mirrored ones); they
do not stand in for a module's own file."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "multiview_plugin"
TOOLS = ROOT / "tools"
# each mirrored tree and the folder under tests/ that mirrors it
TREES = ((PACKAGE, Path("tests")), (TOOLS, Path("tests/tools")))

# Modules without a test file of their own (as paths from the repository root), each with the reason. Every other
# module has one.
EXEMPT = {
    # the command line over tools/reporting/pages.py, tested through its main() in tests/tools/reporting/test_pages.py
    "tools/reporting/__main__.py": "tests/tools/reporting/test_pages.py",
    # the quickstart runner, run end to end on a tiny backbone in tests/e2e/test_quickstart_run.py
    "multiview_plugin/quickstart/__main__.py": "tests/e2e/test_quickstart_run.py",
    # the Tevatron flag snapshot's command line; its table and snapshot are checked in tests/test_tevatron_parity.py
    "tools/tevatron_flags.py": "tests/test_tevatron_parity.py",
}
# ``__init__.py`` files only list a package's exports (the top-level one lazily: tests/test_api.py imports
# through it) and are exempt as a kind.


def mirrored_test(module: str, tests: Path = Path("tests")) -> str:
    """``data/readers.py`` → ``tests/data/test_readers.py``; ``search/_searcher.py`` →
    ``tests/search/test_searcher.py``; ``cli.py`` → ``tests/test_cli.py``; a tool's (``tests``: ``tests/tools``)
    ``reporting/prose.py`` → ``tests/tools/reporting/test_prose.py``."""
    path = Path(module)
    return (tests / path.parent / f"test_{path.stem.strip('_')}.py").as_posix()


def modules(package: Path = PACKAGE) -> list[str]:
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "__init__.py")


def missing_tests(trees: tuple[tuple[Path, Path], ...] = TREES, root: Path = ROOT) -> list[str]:
    out = []
    for tree, tests in trees:
        for m in modules(tree):
            where = (tree.relative_to(root) / m).as_posix()
            if where not in EXEMPT and not (root / mirrored_test(m, tests)).is_file():
                out.append(f"{where} → {mirrored_test(m, tests)}")
    return out


def test_every_module_has_its_mirrored_test_file():
    missing = missing_tests()
    assert not missing, ("these modules have no test file of their own; add one (a few focused tests of the public "
                         f"functions), or list the module in EXEMPT with the reason: {missing}")


def test_the_exemptions_are_current():
    gone = sorted(m for m in EXEMPT if not (ROOT / m).is_file())
    mirrors = {tree.relative_to(ROOT).as_posix(): tests for tree, tests in TREES}
    tested = sorted(m for m in EXEMPT
                    if (ROOT / mirrored_test(m.partition("/")[2], mirrors[m.partition("/")[0]])).is_file())
    elsewhere = sorted(where for where in EXEMPT.values() if not (ROOT / where).is_file())
    assert not gone, f"EXEMPT lists modules that no longer exist: {gone}"
    assert not tested, f"EXEMPT lists modules that now have their own test file (drop them from EXEMPT): {tested}"
    assert not elsewhere, f"EXEMPT names test files that do not exist: {elsewhere}"


def test_mirrored_test_names(tmp_path):
    assert mirrored_test("data/readers.py") == "tests/data/test_readers.py"
    assert mirrored_test("search/_qdrant_engines.py") == "tests/search/test_qdrant_engines.py"
    assert mirrored_test("cli.py") == "tests/test_cli.py"
    assert mirrored_test("reporting/__main__.py", Path("tests/tools")) == "tests/tools/reporting/test_main.py"
    # the check can fail: a new module (of the package or of a tool) without a test file is reported
    package, tools = tmp_path / "multiview_plugin", tmp_path / "tools"
    (package / "data").mkdir(parents=True)
    (package / "data" / "__init__.py").write_text("")
    (package / "data" / "new_format.py").write_text("")
    (package / "cli.py").write_text("")
    (tools / "reporting").mkdir(parents=True)
    (tools / "reporting" / "prose.py").write_text("")
    (tools / "reporting" / "pages.py").write_text("")
    (tmp_path / "tests" / "tools" / "reporting").mkdir(parents=True)
    (tmp_path / "tests" / "test_cli.py").write_text("")
    (tmp_path / "tests" / "tools" / "reporting" / "test_pages.py").write_text("")
    trees = ((package, Path("tests")), (tools, Path("tests/tools")))
    assert missing_tests(trees, tmp_path) == ["multiview_plugin/data/new_format.py → tests/data/test_new_format.py",
                                              "tools/reporting/prose.py → tests/tools/reporting/test_prose.py"]
