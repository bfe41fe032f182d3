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


@pytest.mark.skipif(importlib.util.find_spec("tevatron") is not None, reason="Tevatron is installed here")
def test_tevatron_train_without_tevatron(capsys):
    from multiview_plugin.tevatron.train import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    assert "needs Tevatron v2" in err and "--mvr_num_views" in out
    assert main(["--model_name", "mvr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: multiview_plugin.tevatron needs Tevatron v2") and err.count("\n") == 1


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
