"""The package's floors: the library (data, modeling, losses, encoding, search, evaluation, training) imports no
driver, and the drivers import each other without a cycle. Checked on the source with ast, so an import inside a
function counts as much as one at the top of a module."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "multiview_plugin"
FLOORS = ("data", "modeling", "losses", "encoding", "search", "evaluation", "training")
BOTTOM = ("cli.py", "tevatron_parity.py", "arguments.py", "registry.py", "errors.py", "atomic.py", "bounds.py")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str | None = None) -> set[str]:
    """Every module ``path`` (module ``name``) imports: absolute names, ``from x import y`` gives x and x.y."""
    out: set[str] = set()
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def driver_imports(path: Path, name: str | None = None) -> list[str]:
    return sorted(m for m in imports(path, name) if m == "multiview_plugin.driver"
                  or m.startswith("multiview_plugin.driver."))


@pytest.mark.parametrize("floor", FLOORS)
def test_library_floors_import_no_driver(floor):
    found = {str(p.relative_to(PACKAGE)): driver_imports(p) for p in sorted((PACKAGE / floor).rglob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize("module", BOTTOM)
def test_bottom_modules_import_no_driver(module):
    assert driver_imports(PACKAGE / module) == []


def test_the_checker_sees_driver_imports(tmp_path):
    """The check above can fail: a module importing a driver inside a function, or relatively, is caught."""
    probe = tmp_path / "probe.py"
    probe.write_text("import json\n\ndef f():\n    from multiview_plugin.driver.common import cli\n"
                     "    from ..driver import search\n")
    assert driver_imports(probe, "multiview_plugin.data.probe") == [
        "multiview_plugin.driver", "multiview_plugin.driver.common", "multiview_plugin.driver.common.cli",
        "multiview_plugin.driver.search"]


def test_drivers_import_each_other_without_a_cycle():
    drivers = {module_name(p): p for p in (PACKAGE / "driver").glob("*.py")}
    graph = {name: {m for m in imports(path) if m in drivers and m != name} for name, path in drivers.items()}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError(f"driver import cycle: {' -> '.join([*stack, node, nxt])}")
            if nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
