"""Snapshot Tevatron v2's command-line flags, and write the flag-parity table of docs/tevatron.md.

    python tools/tevatron_flags.py snapshot [--tarball ../shared/vendor/tevatron-dd06310.tar.gz | --installed]
    python tools/tevatron_flags.py readme          # rewrite the table in docs/tevatron.md from the snapshot
    python tools/tevatron_flags.py check --installed   # the snapshot equals the installed Tevatron's flags

The snapshot (tests/data/tevatron_flags.json) lists the flags of Tevatron's train/encode drivers (its
ModelArguments, DataArguments, TevatronTrainingArguments and the transformers.TrainingArguments they extend)
and of its search driver, each with its default. It is read from the vendored source (arguments.py is imported
with the installed transformers; search.py's argparse calls are read without running it), so Tevatron need not be
installed; run it where transformers is Tevatron's pin (5.9.0) so the TrainingArguments flags are that version's.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "tevatron_flags.json"
TARBALL = ROOT.parent / "shared" / "vendor" / "tevatron-dd06310.tar.gz"
ARGUMENTS = "src/tevatron/retriever/arguments.py"
SEARCH = "src/tevatron/retriever/driver/search.py"


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "<required>"
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


def dataclass_flags(module) -> dict[str, dict]:
    from transformers import TrainingArguments

    base = {f.name: _default(f) for f in dataclasses.fields(TrainingArguments) if f.init}
    out = {}
    for name in ("ModelArguments", "DataArguments", "TevatronTrainingArguments"):
        fields = {f.name: _default(f) for f in dataclasses.fields(getattr(module, name)) if f.init}
        # Tevatron's own flags, and the TrainingArguments ones whose default it changes (warmup_ratio)
        out[name] = {k: v for k, v in fields.items() if k not in base or base[k] != v}
    out["TrainingArguments"] = {k: v for k, v in base.items()
                                if not k.startswith("_") and k not in out["TevatronTrainingArguments"]}
    return out


def search_flags(source: str) -> dict:
    """``--flag: default`` of every ``parser.add_argument`` call in Tevatron's search driver."""
    flags = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            name = node.args[0].value.lstrip("-")
            kw = {k.arg: k.value for k in node.keywords}
            if "action" in kw and kw["action"].value == "store_true":
                flags[name] = False
            elif "required" in kw and kw["required"].value:
                flags[name] = "<required>"
            else:
                flags[name] = ast.literal_eval(kw["default"]) if "default" in kw else None
    return flags


def read_sources(tarball: Path | None) -> tuple[str, str, str]:
    """(arguments.py path, search.py text, where from)."""
    if tarball is None:
        spec = importlib.util.find_spec("tevatron.retriever")
        folder = Path(next(iter(spec.submodule_search_locations)))
        return str(folder / "arguments.py"), (folder / "driver" / "search.py").read_text(), "installed tevatron"
    tmp = Path(tempfile.mkdtemp())
    with tarfile.open(tarball) as tar:
        members = {m.name.split("/", 1)[-1] if not m.name.startswith("src/") else m.name: m for m in tar}
        for want in (ARGUMENTS, SEARCH):
            member = members.get(want) or next(m for n, m in members.items() if n.endswith(want))
            (tmp / Path(want).name).write_bytes(tar.extractfile(member).read())
    return str(tmp / "arguments.py"), (tmp / "search.py").read_text(), tarball.name


def snapshot(tarball: Path | None) -> dict:
    import transformers

    args_path, search_source, origin = read_sources(tarball)
    spec = importlib.util.spec_from_file_location("tevatron_arguments", args_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return {"source": origin, "transformers": transformers.__version__,
            "train_encode": dataclass_flags(module), "search": search_flags(search_source)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["snapshot", "check", "readme"])
    p.add_argument("--tarball", type=Path, default=TARBALL, help="Tevatron source tarball (default: the vendored one)")
    p.add_argument("--installed", action="store_true", help="read the installed tevatron package instead")
    p.add_argument("--readme", type=Path, default=ROOT / "docs" / "tevatron.md",
                   help="the Markdown file holding the table markers (default docs/tevatron.md)")
    args = p.parse_args(argv)
    if args.command == "readme":
        sys.path.insert(0, str(ROOT))
        from multiview_plugin.driver.tevatron_parity import write_readme_table

        write_readme_table(args.readme, json.loads(SNAPSHOT.read_text()))
        print(f"updated the flag table in {args.readme}")
        return 0
    snap = snapshot(None if args.installed else args.tarball)
    if args.command == "check":
        stored = json.loads(SNAPSHOT.read_text())
        ok = all(stored[k] == snap[k] for k in ("train_encode", "search"))
        print(f"{SNAPSHOT.name} {'matches' if ok else 'DIFFERS FROM'} {snap['source']} (transformers "
              f"{snap['transformers']})")
        return 0 if ok else 1
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}: {sum(map(len, snap['train_encode'].values()))} train/encode flags, "
          f"{len(snap['search'])} search flags (transformers {snap['transformers']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
