"""The package's floors (docs/layout.md#floors): every module imports only from its own floor or the floors below,
so the pipeline reads bottom-up -- base → data → losses → modeling → training → encoding → search → evaluation →
interfaces → drivers → apps. Checked on the source of every module with ast, so an import inside a function counts
as much as one at the top of a module; the drivers also import each other without a cycle."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "multiview_plugin"

# Bottom-up. A floor lists module names (a folder's name stands for every module in it).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    # cross-cutting helpers every floor may use; they know nothing of models, data formats or drivers
    ("base", ("errors", "atomic", "bounds", "paths", "registry", "cli", "tevatron_parity", "backbones", "scoring",
              "records", "text_options", "ray_runtime", "progress", "lazy")),
    ("data", ("data",)),
    ("losses", ("losses",)),
    ("modeling", ("modeling",)),
    ("training", ("training",)),
    ("encoding", ("encoding",)),
    ("search", ("search", "index")),
    ("evaluation", ("evaluation",)),
    # what users and drivers program against: the Python API, the command-line argument classes, the Pyserini
    # adapters
    ("interfaces", ("api", "arguments", "pyserini")),
    ("drivers", ("driver", "tevatron")),
    # runs the drivers; the package's own __init__ (the public API, imported lazily) sits on top
    ("apps", ("quickstart", "")),
]

# The only upward imports, each with its reason. None: the registry loads the built-in methods and losses by their
# "module:Class" names on first lookup, as it loads third-party ones through entry points (registry.py).
UPWARD_ALLOWED: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, package_dir: Path = PACKAGE) -> bool:
    parts = name.split(".")[1:]
    target = package_dir.joinpath(*parts) if parts else package_dir
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def imports(path: Path, name: str | None = None, package_dir: Path = PACKAGE) -> set[str]:
    """Every module of the package ``path`` (module ``name``) imports, anywhere in it (functions included).

    ``from x import y`` counts x.y when that is a module (``from multiview_plugin import scoring``), else x."""
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
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if is_module(sub, package_dir) else base)
    return {m for m in out if m == "multiview_plugin" or m.startswith("multiview_plugin.")}


def floor_of(module: str) -> int:
    """The index in FLOORS of a module name (``multiview_plugin.data.readers`` → data's)."""
    parts = module.split(".")[1:]
    head = parts[0] if parts else ""
    for i, (_, members) in enumerate(FLOORS):
        if head in members:
            return i
    raise KeyError(f"{module} is on no floor: add it to FLOORS here and to docs/layout.md")


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def violations(modules: dict[str, Path], package_dir: Path = PACKAGE) -> list[str]:
    out = []
    for name, path in modules.items():
        for dep in sorted(imports(path, name, package_dir)):
            if floor_of(dep) > floor_of(name) and (name, dep) not in UPWARD_ALLOWED:
                out.append(f"{name} ({FLOORS[floor_of(name)][0]}) imports {dep} ({FLOORS[floor_of(dep)][0]})")
    return out


def test_every_module_is_on_a_floor():
    assert [m for m in MODULES if not any(m.split(".")[1:2] == [h] or (h == "" and m == "multiview_plugin")
                                          for _, members in FLOORS for h in members)] == []


def test_imports_only_go_down():
    """No module imports from a floor above its own (lazy imports inside functions included)."""
    assert violations(MODULES) == []


def test_upward_exceptions_are_still_needed():
    """Each allowed upward import is still made (a stale exception would hide a new one)."""
    for name, dep in UPWARD_ALLOWED:
        assert dep in imports(MODULES[name]), (name, dep)


def test_the_checker_sees_upward_imports(tmp_path):
    """The check can fail: lazy, relative and ``from package import module`` imports upward are all caught,
    and ``from multiview_plugin import scoring`` counts as the base module, not the package's __init__."""
    pkg = tmp_path / "multiview_plugin"
    for sub in ("data", "evaluation", "driver", "modeling"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "scoring.py").write_text("")
    (pkg / "evaluation" / "answers.py").write_text("")
    (pkg / "driver" / "search.py").write_text("")
    probe = pkg / "data" / "probe.py"
    probe.write_text("import json\nfrom multiview_plugin import scoring\n\n"
                     "def f():\n    from ..evaluation.answers import has_answer\n"
                     "    from multiview_plugin.driver import search\n    import multiview_plugin.modeling\n")
    found = violations({"multiview_plugin.data.probe": probe}, pkg)
    assert found == ["multiview_plugin.data.probe (data) imports multiview_plugin.driver.search (drivers)",
                     "multiview_plugin.data.probe (data) imports multiview_plugin.evaluation.answers (evaluation)",
                     "multiview_plugin.data.probe (data) imports multiview_plugin.modeling (modeling)"]


def test_the_documented_order():
    """docs/layout.md states the order enforced here, and it is the pipeline's: data → modeling/losses → training →
    encoding → index/search → evaluation → drivers."""
    text = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    stated = re.search(r"^\*\*(base → .*)\*\*$", text, flags=re.MULTILINE)
    assert stated, "docs/layout.md: the floors' order line is missing"
    names = [name for name, _ in FLOORS]
    assert stated.group(1).split(" → ") == names
    pipeline = ["data", "modeling", "training", "encoding", "search", "evaluation", "drivers"]
    assert [names.index(n) for n in pipeline] == sorted(names.index(n) for n in pipeline)
    assert names.index("losses") < names.index("modeling")  # the encoders hold their loss
    for _, members in FLOORS[1:8]:  # every library floor is a folder of that name
        assert all((PACKAGE / m / "__init__.py").is_file() for m in members)


def test_drivers_import_each_other_without_a_cycle():
    drivers = {name: path for name, path in MODULES.items() if name.startswith("multiview_plugin.driver.")}
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
