"""Full-scale recipe plans (recipes/plan.py): the index fits 256 GB at measured recall, the plan line, refusal."""

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
sys.path.insert(0, str(RECIPES))

import plan as plan_mod  # noqa: E402
import run as recipe_run  # noqa: E402

LINE = re.compile(r"^plan: RAM \d+ GB, disk \d+ GB, build [\d.]+ h, search [\d.]+ ms/query")


def recipes():
    for path in sorted(RECIPES.glob("*/*.json")):
        yield path.parent.name, path.stem, json.loads(path.read_text())


@pytest.mark.parametrize("bench_name,method,recipe", [r for r in recipes() if r[0] != "beir"],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_full_scale_plans_fit_256_gb_at_measured_recall(bench_name, method, recipe):
    plan = plan_mod.make_plan(bench_name, method, recipe)
    assert plan["fits_budget"] and plan["ram_gb"] <= 256
    assert plan["recall"] >= 0.98
    assert LINE.match(plan_mod.plan_line(plan))
    if method in ("mvr", "dcsr", "dce"):  # multi-view: Flat would not fit (mvr: ~516 GB of float32 views)
        assert plan["index"] != "Flat"


def test_ivf_plan_trains_39_per_list_and_counts_sample_and_docid_map(tmp_path, capsys):
    """The IVF plan passes --train_size >= 39 x nlist to driver.index; its RAM holds the index, the docid map's
    load peak and the training sample; its line names where the recall was measured and what calibrates."""
    recipe = json.loads((RECIPES / "nq" / "mvr.json").read_text())
    plan = plan_mod.make_plan("nq", "mvr", recipe)
    nlist = int(re.search(r"IVF(\d+)", plan["index"]).group(1))
    assert plan["train_size"] >= 39 * nlist
    assert plan["train_gb"] == pytest.approx(plan["train_size"] * plan_mod.DIM * 4 / 1e9)
    assert plan["docid_map_gb"] == pytest.approx(plan["vectors"] * plan_mod.DOCID_MAP_BYTES_PER_ROW / 1e9)
    assert plan["ram_gb"] == pytest.approx(plan["index_ram_gb"] + plan["docid_map_gb"] + plan["train_gb"])
    line = plan_mod.plan_line(plan)
    assert f"measured by bench/ann.py at {plan['measured_index']}, nprobe 8" in line
    assert plan["measured_index"] != plan["index_factory"] and "calibration sets" in line
    assert recipe_run.main(["nq", "mvr", "--dry_run", "--data_dir", str(tmp_path), "--output_dir",
                            str(tmp_path / "dry")]) == 0
    index_cmd = next(c for c in capsys.readouterr().out.splitlines() if "driver.index " in c)
    assert f"--index_factory {plan['index_factory']} --train_size {plan['train_size']}" in index_cmd
    # SQ8's lossy codes: candidates re-scored from an fp16 copy of the views on disk (RAM unchanged)
    assert plan["rescore_store"] == "fp16" and "--rescore_store fp16" in index_cmd
    assert plan["store_gb"] == pytest.approx(plan["vectors"] * plan_mod.DIM * 2 / 1e9)
    assert f"re-scoring store fp16 on disk {plan['store_gb']:.0f} GB" in line
    assert plan["disk_gb"] > plan["store_gb"]


def test_only_lossy_codes_get_a_rescoring_store():
    """The msmarco dce plan (SQfp16 views, document-index candidates) and the dcsr plans (HasAns) get no store."""
    assert plan_mod._lossy_codes("IVF131072,SQ8") and plan_mod._lossy_codes("IVF4096,PQ64")
    assert not plan_mod._lossy_codes("SQfp16") and not plan_mod._lossy_codes("HNSW32")
    plan = plan_mod.make_plan("msmarco", "dce", json.loads((RECIPES / "msmarco" / "dce.json").read_text()))
    assert plan["rescore_store"] is None and plan["store_gb"] == 0
    # dcsr's IVF,SQ8 plan neither: it ranks by HasAns, which never re-scores, so a store would be dead weight
    plan = plan_mod.make_plan("nq", "dcsr", json.loads((RECIPES / "nq" / "dcsr.json").read_text()))
    assert plan["index_factory"].endswith("SQ8") and plan["rescore_store"] is None


def test_budget_changes_the_choice():
    recipe = json.loads((RECIPES / "nq" / "mvr.json").read_text())
    roomy = plan_mod.make_plan("nq", "mvr", recipe, budget_gb=2000)
    tight = plan_mod.make_plan("nq", "mvr", recipe, budget_gb=100)
    assert roomy["index"] == "Flat" and roomy["ram_gb"] > 256
    assert not tight["fits_budget"]


def args(**kw):
    return argparse.Namespace(**{"ram_budget_gb": 256.0, "smoke": False, "dry_run": False, "force_plan": False,
                                 **kw})


def test_plan_above_machine_ram_is_refused_unless_forced(monkeypatch, capsys):
    recipe = json.loads((RECIPES / "nq" / "mvr.json").read_text())
    monkeypatch.setattr(plan_mod, "machine_ram_gb", lambda: 16.0)
    with pytest.raises(SystemExit, match="needs 176 GB of RAM.*has 16 GB"):
        recipe_run.check_plan("nq", "mvr", recipe, args())
    assert recipe_run.check_plan("nq", "mvr", recipe, args(force_plan=True))["index_factory"].endswith("SQ8")
    assert recipe_run.check_plan("nq", "mvr", recipe, args(dry_run=True)) is not None  # dry runs only print
    assert LINE.match(capsys.readouterr().out.splitlines()[0])


def test_refused_before_any_stage(monkeypatch, tmp_path):
    monkeypatch.setattr(plan_mod, "machine_ram_gb", lambda: 16.0)
    with pytest.raises(SystemExit, match="force_plan"):
        recipe_run.main(["nq", "mvr", "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_smoke_dry_run_prints_the_plan(tmp_path, capsys):
    assert recipe_run.main(["msmarco", "dce", "--smoke", "--dry_run", "--output_dir", str(tmp_path / "dry")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(LINE.match(line) and "SQfp16+doc:HNSW32" in line for line in lines)


@pytest.mark.parametrize("argv", [["nq", "mvr"], ["msmarco", "dce"], ["beir", "dpr", "--checkpoint", "m",
                                                                       "--beir_dir", "scifact"]],
                         ids=["nq-mvr", "msmarco-dce", "beir-download"])
def test_full_scale_dry_run_fetches_nothing(argv, tmp_path, monkeypatch, capsys):
    """A dry run without --data_dir prints its plan and the downloads it would make, and touches no network."""
    import urllib.request

    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")

    def no_network(*a, **k):
        raise AssertionError("a dry run must not download")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    monkeypatch.setattr(urllib.request, "urlretrieve", no_network)
    assert recipe_run.main([*argv, "--dry_run", "--output_dir", str(tmp_path / "dry")]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("plan:") for line in out.splitlines())
    assert "# would download" in out and not (tmp_path / "dry").exists()
