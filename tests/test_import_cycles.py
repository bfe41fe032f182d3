"""No import circles in the package (docs/layout.md#floors): the import graph of ``multiview_plugin/``, read from the
source with ``ast``, has no cycle. Every import counts, wherever it is (inside a function, under ``if``, in a
``try``); relative imports are resolved; ``from pkg import name`` is an edge to ``pkg`` (its ``__init__.py`` runs)
and, when ``name`` is a module, also to ``pkg.name``; a package's ``__init__.py`` is a node like any module, so a
module that imports a package depends on everything that package's ``__init__.py`` re-exports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "multiview_plugin"


def module_name(path: Path, package_dir: Path) -> str:
    """``<package_dir>/search/_searcher.py`` → ``multiview_plugin.search._searcher``; a package's ``__init__.py`` → the
    package's name."""
    parts = (package_dir.name, *path.relative_to(package_dir).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package_dir: Path) -> dict[str, Path]:
    return {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}


def _resolve(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` statement names (``from ..a import b`` in ``p.q.m`` → ``p.a``)."""
    if not node.level:
        return node.module or ""
    anchor = name.split(".") if is_package else name.split(".")[:-1]
    anchor = anchor[:len(anchor) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The package modules ``path`` (module ``name``) imports, anywhere in its source."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, name, path.name == "__init__.py")
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    return {m for m in out if m in known and m != name}


def import_graph(package_dir: Path = PACKAGE) -> dict[str, set[str]]:
    modules = package_modules(package_dir)
    known = set(modules)
    return {name: imports_of(path, name, known) for name, path in modules.items()}


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def _shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as a path that returns to it."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    return component


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One line per circle (a set of modules that import each other, directly or through others): a shortest
    cycle in it and the size of the whole circle."""
    return [f"{' -> '.join(_shortest_cycle(graph, c))} (a circle of {len(c)} modules: {', '.join(c)})"
            for c in _components(graph)]


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles in multiview_plugin/:\n" + "\n".join(found)


def script_graph(folder: Path) -> dict[str, set[str]]:
    """The import graph of a folder of scripts that import each other by bare name (``recipes/``: ``run.py``
    imports ``plan``, which their folder on ``sys.path`` resolves), imports inside functions included."""
    scripts = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in scripts.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
        graph[name] = (found & set(scripts)) - {name}
    return graph


def test_the_recipe_scripts_have_no_import_cycle():
    """recipes/run.py and recipes/plan.py read the data sources from recipes/sources.py, not from each other."""
    found = cycles(script_graph(ROOT / "recipes"))
    assert not found, "import cycles in recipes/:\n" + "\n".join(found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``multiview_plugin`` under ``tmp_path`` with these modules (path → source); folders get an empty
    ``__init__.py`` unless given."""
    root = tmp_path / "multiview_plugin"
    for path, source in {"__init__.py": "", **files}.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        for folder in [root, *target.relative_to(root).parents]:
            init = root / folder / "__init__.py"
            if not init.exists():
                init.write_text("")
        target.write_text(source)
    return root


def test_the_checker_sees_lazy_relative_and_reexported_cycles(tmp_path):
    """The check can fail: the three kinds of circle the package had (issue 39) are found -- a lazy import by
    name (losses → registry → modeling → losses), constants imported back and forth (search), a ``from pkg import
    name`` through a package's ``__init__.py`` -- and a relative import resolves."""
    root = _package(tmp_path, {
        "registry.py": "def get(name):\n    import multiview_plugin.modeling\n",
        "losses/mvr.py": "from ..registry import get\n",
        "modeling/__init__.py": "from .mvr import Encoder\n",
        "modeling/mvr.py": "from multiview_plugin.losses.mvr import *\nclass Encoder: ...\n",
        "search/_searcher.py": "from multiview_plugin.search.calibrate import GRID\n",
        "search/calibrate.py": "GRID = 1\n\ndef calibrate():\n    from ._searcher import Searcher\n",
        "api.py": "from multiview_plugin.modeling import base\n",  # base is no module: an edge to modeling/__init__
        "scoring.py": "import multiview_plugin.api\n",
        "driver.py": "from multiview_plugin import scoring\n",  # → multiview_plugin/__init__ and scoring
    })
    (root / "__init__.py").write_text("def __getattr__(name):\n    from multiview_plugin import driver\n")
    graph = import_graph(root)
    assert graph["multiview_plugin.losses.mvr"] == {"multiview_plugin.registry"}
    assert graph["multiview_plugin.driver"] == {"multiview_plugin", "multiview_plugin.scoring"}
    assert graph["multiview_plugin.api"] == {"multiview_plugin.modeling"}
    found = cycles(graph)
    assert len(found) == 3, found
    assert any(line.startswith("multiview_plugin.losses.mvr -> multiview_plugin.registry -> multiview_plugin.modeling")
               for line in found), found
    assert any("multiview_plugin.search._searcher -> multiview_plugin.search.calibrate -> "
               "multiview_plugin.search._searcher" in line for line in found), found
    assert any(line.startswith("multiview_plugin -> multiview_plugin.driver -> multiview_plugin ") for line in found)


def test_a_package_without_circles_passes(tmp_path):
    root = _package(tmp_path, {"a.py": "from multiview_plugin import b\n", "b.py": "import json\n",
                               "sub/c.py": "from ..a import *\nfrom . import d\n", "sub/d.py": ""})
    assert cycles(import_graph(root)) == []
    assert import_graph(root)["multiview_plugin.sub.c"] == {"multiview_plugin.a", "multiview_plugin.sub",
                                                             "multiview_plugin.sub.d"}


def test_the_script_check_sees_scripts_importing_each_other(tmp_path):
    (tmp_path / "run.py").write_text("def main():\n    from plan import make_plan\n")
    (tmp_path / "plan.py").write_text("import json\n\ndef f():\n    from run import NAMES\n")
    assert cycles(script_graph(tmp_path)) == ["plan -> run -> plan (a circle of 2 modules: plan, run)"]
