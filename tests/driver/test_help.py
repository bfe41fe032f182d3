"""Every command-line entry point's ``--help``: no traceback, a ``python -m <module>`` usage line; the drivers'
without importing torch, Faiss or transformers' models (fast); the Tevatron driver's without Tevatron installed."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
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
        elif 'if __name__ == "__main__":' in path.read_text(encoding="utf-8") and module not in INTERNAL:
            out.append(module)
    return out


# modules with a __main__ block that no user runs: ray_runtime's is the watchdog of a local Ray instance
INTERNAL = {"multiview_plugin.ray_runtime"}


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
                   "--temperature_schedule {fixed,annealed}", "--mvr_views {paper,residual,region}",
                   "--mlr_pooling {max,self_contrastive,average,scalar_mix}", "--model_name {dce,dcsr,dpr,mebert,"):
        assert listed in out, listed
    text = out[out.index("\ntext options"):out.index("\nLoRA (")]  # the group after it
    assert "--pooling" in text and "--passage_max_len" in text and "--append_eos_token" in text


DRIVERS = ["train", "encode", "index", "search", "evaluate", "analyze", "mine_negatives", "generate_queries"]
HF_PARSED = {"train", "encode", "generate_queries"}  # their flags are dataclasses parsed by HfArgumentParser
HEAVY = ("torch", "faiss", "datasets", "scipy", "transformers.training_args", "transformers.modeling_utils")


def _help_imports(module: str, flag: str = "--help") -> tuple[int, str, set[str]]:
    """``python -m <module> <flag>`` in a fresh process: (exit status, stdout, the heavy modules it imported)."""
    code = (f"import runpy, sys\nsys.argv = ['x', {flag!r}]\ncode = 0\ntry:\n"
            f"    runpy.run_module({module!r}, run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code or 0\n"
            f"print(' '.join(m for m in {HEAVY + ('transformers',)!r} if m in sys.modules), file=sys.stderr)\n"
            "sys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = done.stderr.strip().splitlines()
    return done.returncode, done.stdout, set(lines[-1].split()) if lines else set()


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_driver_help_loads_no_torch_faiss_or_transformers(driver):
    """Every driver's ``--help`` builds its parser before torch, Faiss, datasets or transformers' models load
    (imported in the functions that need them): fast on a cold start (bench/help_time.log). The plain argparse
    drivers import no transformers at all; the dataclass drivers only its argument parser."""
    module = f"multiview_plugin.driver.{driver}"
    code, out, heavy = _help_imports(module)
    assert code == 0 and out.startswith(f"usage: python -m {module}"), out[:300]
    assert not heavy & {"torch", "datasets", "scipy", "transformers.training_args", "transformers.modeling_utils"}
    if driver not in HF_PARSED:
        assert "transformers" not in heavy
    if driver != "index":  # index: its defaults come from index/ and search.calibrate, which load Faiss
        assert "faiss" not in heavy


def test_train_help_lists_the_common_flags_and_help_all_every_flag():
    """``train --help``: the project's flags and the common Trainer flags, without transformers.TrainingArguments
    (it loads torch and accelerate); ``--help_all``: every flag. The method options come from
    ``modeling.method_options`` (no torch), so the short help loads no torch."""
    code, short, heavy = _help_imports("multiview_plugin.driver.train")
    assert code == 0 and not heavy & {"torch", "transformers.training_args", "transformers.modeling_utils"}
    code, full, heavy_all = _help_imports("multiview_plugin.driver.train", "--help_all")
    assert code == 0 and "transformers.training_args" in heavy_all
    for flag in ("--model_name", "--mvr_num_views", "--dataset_path", "--dev_queries", "--grad_cache",
                 "--output_dir", "--per_device_train_batch_size", "--learning_rate", "--num_train_epochs",
                 "--save_total_limit", "--bf16"):
        assert f"  {flag} " in short and f"  {flag} " in full, flag
    for flag in ("--lr_scheduler_type", "--adam_beta1", "--eval_strategy", "--push_to_hub"):
        assert f"  {flag} " not in short and f"  {flag} " in full, flag
    assert "--help_all lists" in short and len(short.splitlines()) < len(full.splitlines())


def test_quickstart_help_loads_no_torch_faiss_or_transformers():
    """``python -m multiview_plugin.quickstart --help``: torch, the encoders and the searchers are imported where
    they are used, after the arguments are parsed."""
    code, out, heavy = _help_imports("multiview_plugin.quickstart")
    assert code == 0 and out.startswith("usage: python -m multiview_plugin.quickstart"), out[:300]
    assert not heavy, heavy


def test_common_trainer_flags_match_training_arguments():
    """The short --help's Trainer flags carry the installed TrainingArguments' defaults and types (drift guard),
    and MultiViewTrainingArguments parses every flag of both help texts."""
    import dataclasses
    import typing

    from transformers import TrainingArguments

    from multiview_plugin.arguments import CommonTrainerFlags, MultiViewTrainerFlags, MultiViewTrainingArguments

    theirs = TrainingArguments.__dataclass_fields__
    hints = typing.get_type_hints(TrainingArguments)
    for f in dataclasses.fields(CommonTrainerFlags):
        assert f.name in theirs, f.name
        assert f.default == theirs[f.name].default or (f.name == "output_dir" and theirs[f.name].default
                                                       is dataclasses.MISSING), f.name
        assert typing.get_type_hints(CommonTrainerFlags)[f.name] == hints[f.name] or f.name == "save_steps", f.name
    ours = MultiViewTrainingArguments.__dataclass_fields__
    for f in dataclasses.fields(MultiViewTrainerFlags):
        assert ours[f.name].default == f.default, f.name
    assert MultiViewTrainingArguments.argument_group("grad_cache")[0] == "training (multiview_plugin's Trainer flags)"
    assert MultiViewTrainingArguments.argument_group("seed")[0].startswith("training (the Hugging Face Trainer's")


def test_training_arguments_pickle_by_name(tmp_path):
    """MultiViewTrainingArguments is made on first use; the Trainer still saves it (training_args.bin) by name."""
    import pickle

    from multiview_plugin.arguments import MultiViewTrainingArguments

    args = MultiViewTrainingArguments(output_dir=str(tmp_path), grad_cache=True)
    again = pickle.loads(pickle.dumps(args))
    assert type(again) is MultiViewTrainingArguments and again.grad_cache and again.warmup_ratio == 0.1
