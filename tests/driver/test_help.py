"""Every command-line entry point's ``--help``: no traceback, a ``python -m <module>`` usage line; the encode
driver's without importing torch (fast); the Tevatron driver's without Tevatron installed."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "multiview_plugin"


def entry_points() -> list[str]:
    """Every module ``python -m`` runs: those with a ``__main__`` block, and packages with a ``__main__.py``."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if path.name == "__main__.py":
            out.append(module.removesuffix(".__main__"))
        elif 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            out.append(module)
    return out


def test_the_entry_points_are_found():
    assert {"multiview_plugin.driver.train", "multiview_plugin.driver.encode", "multiview_plugin.tevatron.train",
            "multiview_plugin.quickstart", "multiview_plugin.data.squad"} <= set(entry_points())


@pytest.mark.parametrize("module", entry_points())
def test_help_has_no_traceback_and_a_python_m_usage_line(module, capsys):
    package_main = (PACKAGE.parent / module.replace(".", "/") / "__main__.py").exists()
    main = importlib.import_module(f"{module}.__main__" if package_main else module).main
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert out.startswith(f"usage: python -m {module} "), out[:200]


SUBCOMMANDS = [("tools.reporting", c) for c in ("add", "render", "check", "check-quickstart")] + [
    ("multiview_plugin.pyserini", "encode-queries")]


@pytest.mark.parametrize("module, command", SUBCOMMANDS)
def test_subcommand_help_has_no_traceback(module, command, capsys):
    package_main = (PACKAGE.parent / module.replace(".", "/") / "__main__.py").exists()
    main = importlib.import_module(f"{module}.__main__" if package_main else module).main
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and out.startswith(f"usage: python -m {module} {command} "), out[:200]


def test_the_subcommands_are_all_listed(capsys):
    """A new subcommand of a listed entry point joins SUBCOMMANDS."""
    for module in {m for m, _ in SUBCOMMANDS}:
        package_main = (PACKAGE.parent / module.replace(".", "/") / "__main__.py").exists()
        with pytest.raises(SystemExit):
            importlib.import_module(f"{module}.__main__" if package_main else module).main(["--help"])
        out = capsys.readouterr().out
        listed = out[out.index("{") + 1:out.index("}")].split(",")
        assert sorted(listed) == sorted(c for m, c in SUBCOMMANDS if m == module)


def test_recipe_runner_help_without_tevatron_or_pyserini():
    """``python recipes/run.py --help`` (outside the package; no Tevatron, Pyserini or ir_datasets needed)."""
    done = subprocess.run([sys.executable, str(PACKAGE.parent / "recipes" / "run.py"), "--help"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)}, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.startswith("usage: python recipes/run.py ") and "--dry_run" in done.stdout


def test_train_help_is_grouped_with_choices(capsys):
    from multiview_plugin.driver.train import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for group in ("model (every method):", "text options (every method",
                  "mvr options (only with --model_name mvr):", "dcsr options (only with --model_name dcsr):",
                  "LoRA (", "data:", "dev evaluation (",
                  "training (the Hugging Face Trainer's flags", "training (multiview_plugin's Trainer flags):"):
        assert f"\n{group}" in out, group
    for listed in ("--pooling {cls,first,mean,avg,average,last,eos}", "--padding_side {right,left}",
                   "--temperature_schedule {fixed,annealed}", "--mvr_views {paper,residual}",
                   "--mlr_pooling {max,self_contrastive,average,scalar_mix}", "--model_name {dce,dcsr,dpr,mebert,"):
        assert listed in out, listed
    text = out[out.index("\ntext options"):out.index("\nLoRA (")]  # the group after it
    assert "--pooling" in text and "--passage_max_len" in text and "--append_eos_token" in text


def test_encode_help_imports_no_torch_and_is_fast():
    """``driver.encode --help`` parses before torch, transformers' models or the library load (13.7 s before,
    1.8 s after on a loaded 2-core machine: bench/help_time.log). The bound is generous; the import check is the
    guard."""
    code = ("import runpy, sys\nsys.argv = ['encode', '--help']\ntry:\n"
            "    runpy.run_module('multiview_plugin.driver.encode', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0 and "usage: python -m multiview_plugin.driver.encode" in done.stdout
    assert done.stderr.strip().endswith("NO-TORCH")
    assert elapsed < 30, f"encode --help took {elapsed:.1f} s"


def _train_help(env: dict) -> tuple[str, float, bool]:
    """``python -m multiview_plugin.driver.train --help`` in a fresh process: (stdout, seconds, torch imported)."""
    code = ("import runpy, sys\nsys.argv = ['train', '--help']\ntry:\n"
            "    runpy.run_module('multiview_plugin.driver.train', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, time.perf_counter() - start, done.stderr.strip().splitlines()[-1] == "TORCH"


def test_train_help_is_cached_identical_and_then_imports_no_torch(tmp_path, monkeypatch):
    """``driver.train --help`` needs transformers.TrainingArguments and every method's options (17 s on a loaded
    2-core machine, 5.2 s idle: bench/help_time.log). The first call keeps the text (MULTIVIEW_HELP_CACHE); later
    calls print it without importing torch (0.7 s idle), the same text as the parser's own; another width or a
    changed module of the package gives another key."""
    from multiview_plugin.cli import help_cache_file
    from multiview_plugin.driver.train import PROG, build_parser

    monkeypatch.setenv("MULTIVIEW_HELP_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    first, _, first_torch = _train_help(env)
    assert first_torch and len(list(tmp_path.glob("multiview_plugin.driver.train.*.txt"))) == 1
    second, seconds, second_torch = _train_help(env)
    assert not second_torch and second == first
    assert first == build_parser().format_help()  # the parser's own text, at the same width
    assert seconds < 30, f"cached train --help took {seconds:.1f} s"
    key = help_cache_file(PROG)
    monkeypatch.setenv("COLUMNS", "101")
    assert help_cache_file(PROG) != key
    monkeypatch.setenv("COLUMNS", "100")
    module = PACKAGE / "bounds.py"
    st = module.stat()
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    try:
        assert help_cache_file(PROG) != key
    finally:
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert help_cache_file(PROG) == key
    monkeypatch.setenv("MULTIVIEW_HELP_CACHE", "0")
    assert help_cache_file(PROG) is None
