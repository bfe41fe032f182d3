"""Tests mirror the package (docs/layout.md#tests): the tests of ``multiview_plugin/<folder>/<module>.py`` (or
``_<module>.py``) are in ``tests/<folder>/test_<module>.py``, a top-level module's in ``tests/test_<module>.py``.
Suites that cross modules stay where they are (``tests/reliability/``, ``tests/e2e/``, ``tests/interop/``, and
topic files beside the mirrored ones); they do not stand in for a module's own file."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "multiview_plugin"

# Modules without a test file of their own, each with the reason. Every other module has one.
EXEMPT = {
    # the command line over reporting/pages.py, tested through its main() in tests/reporting/test_pages.py
    "reporting/__main__.py": "tests/reporting/test_pages.py",
    # the quickstart runner, run end to end on a tiny backbone in tests/e2e/test_quickstart_run.py
    "quickstart/__main__.py": "tests/e2e/test_quickstart_run.py",
}
# ``__init__.py`` files only list a package's exports (the top-level one lazily: tests/test_api.py imports
# through it) and are exempt as a kind.


def mirrored_test(module: str) -> str:
    """``data/readers.py`` → ``tests/data/test_readers.py``; ``search/_index.py`` → ``tests/search/test_index.py``;
    ``cli.py`` → ``tests/test_cli.py``."""
    path = Path(module)
    return (Path("tests") / path.parent / f"test_{path.stem.strip('_')}.py").as_posix()


def modules(package: Path = PACKAGE) -> list[str]:
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "__init__.py")


def missing_tests(package: Path = PACKAGE, root: Path = ROOT) -> list[str]:
    return [f"{m} → {mirrored_test(m)}" for m in modules(package)
            if m not in EXEMPT and not (root / mirrored_test(m)).is_file()]


def test_every_module_has_its_mirrored_test_file():
    missing = missing_tests()
    assert not missing, ("these modules have no test file of their own; add one (a few focused tests of the public "
                         f"functions), or list the module in EXEMPT with the reason: {missing}")


def test_the_exemptions_are_current():
    gone = sorted(m for m in EXEMPT if not (PACKAGE / m).is_file())
    tested = sorted(m for m in EXEMPT if (ROOT / mirrored_test(m)).is_file())
    elsewhere = sorted(where for where in EXEMPT.values() if not (ROOT / where).is_file())
    assert not gone, f"EXEMPT lists modules that no longer exist: {gone}"
    assert not tested, f"EXEMPT lists modules that now have their own test file (drop them from EXEMPT): {tested}"
    assert not elsewhere, f"EXEMPT names test files that do not exist: {elsewhere}"


def test_mirrored_test_names(tmp_path):
    assert mirrored_test("data/readers.py") == "tests/data/test_readers.py"
    assert mirrored_test("search/_qdrant_engines.py") == "tests/search/test_qdrant_engines.py"
    assert mirrored_test("cli.py") == "tests/test_cli.py"
    assert mirrored_test("reporting/__main__.py") == "tests/reporting/test_main.py"
    # the check can fail: a new module without a test file is reported
    package = tmp_path / "multiview_plugin"
    (package / "data").mkdir(parents=True)
    (package / "data" / "__init__.py").write_text("")
    (package / "data" / "new_format.py").write_text("")
    (package / "cli.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cli.py").write_text("")
    assert missing_tests(package, tmp_path) == ["data/new_format.py → tests/data/test_new_format.py"]
