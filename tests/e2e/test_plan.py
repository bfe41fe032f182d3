"""Full-scale recipe plans (recipes/plan.py): the index fits 256 GB at measured recall, the plan line, refusal."""

import argparse
import json
import math
import re
import sys
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
sys.path.insert(0, str(RECIPES))

import plan as plan_mod  # noqa: E402
import run as recipe_run  # noqa: E402
import sources as recipe_sources  # noqa: E402

LINE = re.compile(r"^plan: RAM \d+ GB, disk \d+ GB, build [\d.,]+ h( \([\d.,]+ days\))?, search [\d.]+ ms/query")


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
    # the fast build path: two-level k-means and an HNSW quantiser, recall measured by bench/ivf_build.py
    assert plan["index_factory"] == f"IVF{nlist}_HNSW32,SQ8" and plan["ivf_training"] == "two_level"
    assert "measured by bench/ivf_build.py: IVF" in line and "calibrated on other queries" in line
    assert plan["measured_index"] != plan["index_factory"] and "calibration sets" in line
    assert recipe_run.main(["nq", "mvr", "--dry_run", "--data_dir", str(tmp_path), "--output_dir",
                            str(tmp_path / "dry")]) == 0
    index_cmd = next(c for c in capsys.readouterr().out.splitlines() if "driver.index " in c)
    assert (f"--index_factory {plan['index_factory']} --train_size {plan['train_size']} --ivf_training two_level"
            in index_cmd)
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
    assert plan["index_factory"].endswith(("SQ8", "SQfp16")) and plan["rescore_store"] is None
    # and its recall is that of the codes alone (HasAns never re-scores), measured held out
    assert "codes alone" in plan["recall_source"] and plan["recall"] >= 0.98


def test_budget_changes_the_choice():
    recipe = json.loads((RECIPES / "nq" / "mvr.json").read_text())
    roomy = plan_mod.make_plan("nq", "mvr", recipe, budget_gb=2000)
    tight = plan_mod.make_plan("nq", "mvr", recipe, budget_gb=100)
    assert roomy["index"] == "Flat" and roomy["ram_gb"] > 256
    assert tight["ram_gb"] <= 100 and (tight["nodes"] > 1 or tight["index"] != plan_mod.make_plan(
        "nq", "mvr", recipe)["index"])
    with pytest.raises(plan_mod.PlanRefused, match=r"what fits 100 GB: --nodes \d+ with .*or a node with"):
        plan_mod.make_plan("nq", "mvr", recipe, budget_gb=100, nodes=1) if tight["nodes"] > 1 else \
            plan_mod.make_plan("nq", "mvr", recipe, budget_gb=1, nodes=1)


def args(**kw):
    return argparse.Namespace(**{"ram_budget_gb": 256.0, "max_ms_per_query": None, "smoke": False, "dry_run": False,
                                 "force_plan": False, "cores": 1, "gpus": 1, "gpu_name": "H100", "nodes": None,
                                 "checkpoint": None, "data_dir": None, "topics_dir": None, "pseudo_queries": None,
                                 "beir_dir": None, "train_beir_dir": None, **kw})


def test_plan_above_machine_ram_is_refused_unless_forced(monkeypatch, capsys):
    recipe = json.loads((RECIPES / "nq" / "mvr.json").read_text())
    monkeypatch.setattr(plan_mod, "machine_ram_gb", lambda: 16.0)
    with pytest.raises(SystemExit, match="needs 176 GB of RAM.*has 16 GB"):
        recipe_run.check_plan("nq", "mvr", recipe, args())
    assert recipe_run.check_plan("nq", "mvr", recipe, args(force_plan=True))["corpus"]["index_factory"].endswith(
        "SQ8")
    assert recipe_run.check_plan("nq", "mvr", recipe, args(dry_run=True))  # dry runs only print
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


# ----------------------------------------------------------------------------- every stage, for a stated machine

STAGES = ("downloads:", "training:", "encoding:", "shard disk:", "index build:", "calibration:", "search:", "totals:")


def dry_run(argv, tmp_path, capsys, monkeypatch=None):
    capsys.readouterr()
    assert recipe_run.main([*argv, "--dry_run", "--output_dir", str(tmp_path / "dry")]) == 0
    return capsys.readouterr().out


def stage(out: str, name: str) -> str:
    return next(line.strip() for line in out.splitlines() if line.strip().startswith(name))


def hours(text: str) -> float:
    return float(re.search(r"([\d,.]+) h", text).group(1).replace(",", ""))


@pytest.mark.parametrize("argv,shard_gb", [(["nq", "mvr"], 258), (["nq", "dcsr"], 157), (["msmarco", "dce"], 136),
                                           (["beir", "dcsr"], None)], ids=["nq-mvr", "nq-dcsr", "msmarco-dce",
                                                                           "beir-dcsr"])
def test_dry_run_prints_every_stage_within_a_day_on_32_cores(argv, shard_gb, tmp_path, capsys):
    """Every stage, with the shard disk the build reads, and an index build of at most 24 h on 32 cores."""
    out = dry_run([*argv, "--cores", "32"], tmp_path, capsys)
    for name in STAGES + (("generation",) if argv[1] == "dce" else ()):
        assert stage(out, name), name
    if shard_gb:  # fp16: vectors x 768 x 2 bytes (nq mvr: 168M view vectors; msmarco dce: 88M)
        assert f"shard disk: {shard_gb:,} GB of fp16 shards" in out
    build = stage(out, "index build:")
    assert hours(build) <= 24 and "on 32 cores" in build and "bench/" in build
    for name in ("training:", "encoding:", "calibration:", "search:"):  # each names its measurement
        assert "bench/" in stage(out, name) or "results/" in stage(out, name), name
    for name in ("training:", "encoding:"):  # CPU figures from measured rates; no GPU was measured: no GPU figure
        assert "bench/throughput.log" in stage(out, name) and "on 1 GPU (H100): not measured (no GPU lent" in stage(
            out, name), name


def test_more_cores_and_gpus_shorten_their_stages(tmp_path, capsys):
    """CPU stages: the measured one-thread rate x cores; the build: one core's time / the speed-up measured at the
    most threads <= cores (bench/build_scaling_768.json), never extrapolated past the largest count measured."""
    one = dry_run(["nq", "mvr", "--cores", "1", "--gpus", "1"], tmp_path, capsys)
    many = dry_run(["nq", "mvr", "--cores", "32", "--gpus", "8"], tmp_path, capsys)
    speedup, at, most = plan_mod.build_speedup(32)
    assert at <= most and speedup >= 1
    # both printed to 0.1 h from one hour up: up to 0.05 h of rounding each
    assert hours(stage(many, "index build:")) == pytest.approx(hours(stage(one, "index build:")) / speedup, rel=0.02,
                                                               abs=0.1)
    assert f"measured up to {most} threads: more cores are not credited" in stage(many, "index build:")
    assert hours(stage(many, "encoding:")) * 20 < hours(stage(one, "encoding:"))
    assert "on 8 GPUs (H100): not measured" in stage(many, "encoding:")
    assert "on 1 GPU (H100): not measured" in stage(one, "encoding:")
    cpu = dry_run(["nq", "mvr", "--gpus", "0", "--cores", "32"], tmp_path, capsys)
    assert "no GPU stated (--gpus 0)" in stage(cpu, "training:") and "on 32 cores" in stage(cpu, "encoding:")


def test_gpu_stages_are_priced_from_a_gpu_measurement_of_the_gpu_stated(tmp_path, capsys, monkeypatch):
    """Where bench/throughput_gpu.json exists (bench/throughput.py --device cuda, run by bench/device_checks.sh on a
    lent GPU), the GPU side of training, generation and encoding is its rate at the stage's shape x --gpus, naming
    the log; for another --gpu_name it stays "not measured" (no rate carried across devices). The rows here are
    the CPU bench's with invented rates: the test checks the pricing, not a GPU."""
    rows = [dict(row, **{key: row[key] * 100 for key in ("examples_per_s", "passages_per_s", "queries_per_s")
                         if key in row}) for row in plan_mod.throughput()["rows"]]
    fake = {"hardware": {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "amp": "bf16"}, "rows": rows}
    (tmp_path / "gpu.json").write_text(json.dumps(fake))
    monkeypatch.setattr(plan_mod, "THROUGHPUT_GPU", tmp_path / "gpu.json")
    out = dry_run(["msmarco", "dce", "--gpus", "8", "--cores", "1"], tmp_path, capsys)
    for name in ("training:", "generation", "encoding:"):
        assert "on 8 GPUs (H100): " in stage(out, name) and "[bench/throughput_gpu.log: bf16 autocast" in stage(
            out, name), name
    encoding = stage(out, "encoding:")
    row = plan_mod._rate(fake, "encode", passage_len=128)
    passages = int(re.search(r"encoding: ([\d,]+) passages", encoding).group(1).replace(",", ""))
    gpu_part = encoding.split("on 8 GPUs (H100): ")[1]
    assert hours(gpu_part) == pytest.approx(passages * 10 / row["passages_per_s"] / 8 / 3600, rel=0.01)
    other = dry_run(["msmarco", "dce", "--gpus", "8", "--cores", "1", "--gpu_name", "A100"], tmp_path, capsys)
    assert "on 8 GPUs (A100): not measured (bench/throughput_gpu.json measured NVIDIA H100" in stage(other, "encoding:")


def test_every_figure_comes_from_a_measured_rate(tmp_path, capsys):
    """issue 38: the msmarco dce warm-up was priced at ~2,190 H100-hours from a MiniLM run x a bert-base/MiniLM
    ratio measured on CPU, and generation had no GPU figure at all. Now every rate is a row of bench/throughput.json
    (its hardware named), no GPU figure is printed where no GPU was measured, and each stage prints its FLOPs:
    the CPU hours x the achieved FLOP rate the bench logged give back those FLOPs (the projection is consistent)."""
    bench = plan_mod.throughput()
    out = dry_run(["msmarco", "dce", "--gpus", "8", "--cores", "1"], tmp_path, capsys)
    assert "GPU-h" not in out and "MiniLM" not in out and "bert-base / MiniLM" not in out
    train, gen = stage(out, "training:"), stage(out, "generation")
    for part in (train.split("; warm-up")[1], gen):
        assert "on 8 GPUs (H100): not measured (no GPU lent in this session" in part and "FLOPs" in part
    assert bench["hardware"]["name"] in train
    row = plan_mod._rate(bench, "train", query_len=16, passage_len=128, group=1)
    warm = train.split("; warm-up")[1]
    examples = 8_841_823 * 10 * 10  # passages x pseudo-queries x warm-up epochs
    flops = float(re.search(r"the stage is ([\d.e+]+) FLOPs", warm).group(1))
    assert flops == pytest.approx(examples * row["flops_per_example"], rel=0.01)
    # 6 x params x tokens: bert-base's ~85M non-embedding parameters x (16 + 128) tokens
    assert 6 * 80e6 * 144 < row["flops_per_example"] < 6 * 90e6 * 144
    cpu_h = hours(re.search(r"on CPU ([\d,.]+ h)", warm).group(1))
    assert cpu_h * 3600 * row["gflops_per_s"] * 1e9 == pytest.approx(flops, rel=0.02)


def ram_of(out: str) -> float:
    return float(re.search(r"^plan: RAM (\d+) GB", out, re.M).group(1))


def test_ram_budget_64_gives_a_plan_within_it_or_names_what_fits(tmp_path, capsys):
    out = dry_run(["nq", "mvr", "--ram_budget_gb", "64"], tmp_path, capsys)
    assert ram_of(out) <= 64 and "budget 64" in stage(out, "totals:")
    # one node asked for: a plan within 64 GB on it, or a one-line refusal naming what fits
    try:
        out = dry_run(["nq", "mvr", "--ram_budget_gb", "64", "--nodes", "1"], tmp_path, capsys)
        assert ram_of(out) <= 64
    except SystemExit as refused:
        assert str(refused).startswith("error: plan: nq/mvr fits no index in 64 GB") and "what fits 64 GB" in str(
            refused) and "\n" not in str(refused)
    assert not (tmp_path / "dry").exists()


def test_different_budgets_give_different_plans(tmp_path, capsys):
    outs = {b: dry_run(["nq", "mvr", "--ram_budget_gb", str(b)], tmp_path, capsys) for b in (16, 100, 150, 256)}
    for b, out in outs.items():
        assert ram_of(out) <= b
    plans = {b: re.search(r"^plan: .*$", out, re.M).group(0) for b, out in outs.items()}
    assert len(set(plans.values())) >= 3 and plans[16] != plans[100]


def test_every_download_is_listed(tmp_path, capsys, monkeypatch):
    """Without local data (no developer shared folder, no Pyserini / ir_datasets): backbone, training set, corpus,
    test questions with where to get them; dce adds the doc2query model; beir lists each BEIR zip."""
    monkeypatch.setattr(recipe_sources, "SHARED", tmp_path / "no-shared")
    monkeypatch.setattr(recipe_sources, "_installed", lambda module: False)
    out = stage(dry_run(["nq", "mvr"], tmp_path, capsys), "downloads:")
    for item in ("backbone bert-base-uncased", "training set Tevatron/wikipedia-nq", "corpus "
                 "Tevatron/wikipedia-nq-corpus", "test questions topics.dpr.nq.test.txt (not found: pass --topics_dir"):
        assert item in out, item
    out = stage(dry_run(["msmarco", "dce"], tmp_path, capsys), "downloads:")
    for item in ("doc2query model castorini/doc2query-t5-base-msmarco", "Tevatron/msmarco-passage ",
                 "qrels.dl19-passage.txt", "topics.dl20.txt"):
        assert item in out, item
    out = stage(dry_run(["beir", "dcsr"], tmp_path, capsys), "downloads:")
    assert "backbone bert-base-uncased" in out and out.count("BEIR dataset") == 6 and "trec-covid.zip" in out
    # local files are not downloads; a checkpoint needs no backbone nor training set
    topics = tmp_path / "anserini"
    (topics / "topics").mkdir(parents=True)
    (topics / "topics" / "topics.dpr.nq.test.txt").write_text("q\t['a']\n")
    out = stage(dry_run(["nq", "mvr", "--topics_dir", str(topics), "--checkpoint", "m"], tmp_path, capsys),
                "downloads:")
    assert "topics.dpr" not in out and "backbone" not in out and "training set" not in out


def test_symbolic_eval_files_come_from_pyserini(tmp_path, monkeypatch):
    """With Pyserini installed, Anserini's names resolve to its topics / qrels, written in Anserini's formats."""
    import types

    qrels = tmp_path / "q.txt"
    qrels.write_text("1 0 d1 1\n")
    fake = types.ModuleType("pyserini.search")
    # Anserini's DPR topic reader keeps qa.csv's answers field as a string, sometimes CSV-quoted
    fake.get_topics = lambda name: {1: {"title": "who", "answers": '["x", "y"]'},
                                    0: {"title": "what", "answers": '"[""z""]"'}}
    fake.get_qrels_file = lambda name: str(qrels)
    monkeypatch.setitem(sys.modules, "pyserini", types.ModuleType("pyserini"))
    monkeypatch.setitem(sys.modules, "pyserini.search", fake)
    monkeypatch.setattr(recipe_sources, "SHARED", tmp_path / "no-shared")
    monkeypatch.setattr(recipe_sources, "_installed", lambda module: module == "pyserini")
    a = args()
    path, source = recipe_sources.locate_eval_file("topics.dpr.nq.test.txt", a)
    assert path is None and source == "Pyserini get_topics('dpr-nq-test')"
    out = recipe_run.eval_file("topics.dpr.nq.test.txt", a, tmp_path / "data", dry_run=False)
    assert out.read_text().splitlines() == ["what\t['z']", "who\t['x', 'y']"]  # qid order, Anserini's DPR format
    out = recipe_run.eval_file("qrels.dl19-passage.txt", a, tmp_path / "data", dry_run=False)
    assert out.read_text() == "1 0 d1 1\n"
    monkeypatch.setattr(recipe_sources, "_installed", lambda module: False)
    with pytest.raises(SystemExit, match="error: topics.dl20.txt: not found: pass --topics_dir"):
        recipe_run.eval_file("topics.dl20.txt", a, tmp_path / "data", dry_run=False)


def test_symbolic_eval_files_come_from_ir_datasets(tmp_path, monkeypatch):
    """Without Pyserini, ir_datasets' names resolve (its DPR queries carry answers; its qrels their relevance), and
    a file ir_datasets does not hold (SQuAD's DPR test set) says where to get it."""
    import types
    from collections import namedtuple

    Query, DprQuery = namedtuple("Query", "query_id text"), namedtuple("DprQuery", "query_id text answers")
    Qrel = namedtuple("Qrel", "query_id doc_id relevance iteration")
    loaded = {"dpr-w100/natural-questions/test": [DprQuery("0", "who", ("x", "y"))],
              "msmarco-passage/trec-dl-2019/judged": [Query("7", "what"), Qrel("7", "d1", 2, "0")]}
    fake = types.ModuleType("ir_datasets")
    fake.load = lambda name: types.SimpleNamespace(
        queries_iter=lambda: iter([r for r in loaded[name] if not isinstance(r, Qrel)]),
        qrels_iter=lambda: iter([r for r in loaded[name] if isinstance(r, Qrel)]))
    monkeypatch.setitem(sys.modules, "ir_datasets", fake)
    monkeypatch.setattr(recipe_sources, "SHARED", tmp_path / "no-shared")
    monkeypatch.setattr(recipe_sources, "_installed", lambda module: module == "ir_datasets")
    a = args()
    assert recipe_sources.locate_eval_file("topics.dpr.nq.test.txt", a) == (
        None, "ir_datasets 'dpr-w100/natural-questions/test'")
    out = recipe_run.eval_file("topics.dpr.nq.test.txt", a, tmp_path / "data", dry_run=False)
    assert out.read_text().splitlines() == ["who\t['x', 'y']"]
    assert recipe_run.eval_file("topics.dl19-passage.txt", a, tmp_path / "data", dry_run=False).read_text() == \
        "7\twhat\n"
    assert recipe_run.eval_file("qrels.dl19-passage.txt", a, tmp_path / "data", dry_run=False).read_text() == \
        "7 0 d1 2\n"
    with pytest.raises(SystemExit, match="error: topics.dpr.squad.test.txt: not found: pass --topics_dir .* or pip "
                                         "install pyserini$"):
        recipe_run.eval_file("topics.dpr.squad.test.txt", a, tmp_path / "data", dry_run=False)


# ----------------------------------------------------------------------------- plans the runner carries out


def commands(out: str, module: str) -> list[str]:
    return [line[2:] for line in out.splitlines() if line.startswith("$ ") and f"-m {module} " in line]


def test_gpus_8_trains_and_encodes_under_torchrun(tmp_path, capsys):
    """issue 38: --gpus 8 priced training on 8 GPUs while the runner trained in one process. Now the plan's
    commands are torchrun ones: the recipe's batch of 128 split 16 per process with in-batch negatives gathered
    across them, and one parallel encode over the shards."""
    out = dry_run(["nq", "mvr", "--gpus", "8", "--data_dir", str(tmp_path / "raw")], tmp_path, capsys)
    (train,) = commands(out, "multiview_plugin.driver.train")
    assert train.startswith("torchrun --nproc_per_node 8 -m multiview_plugin.driver.train ")
    assert "--per_device_train_batch_size 16 " in train and "--negatives_x_device" in train
    (encode,) = commands(out, "multiview_plugin.driver.encode")
    assert encode.startswith("torchrun --nproc_per_node 8 -m multiview_plugin.driver.encode ")
    assert "--dataset_number_of_shards 8" in encode and "--dataset_shard_index" not in encode
    one = dry_run(["nq", "mvr", "--gpus", "1", "--data_dir", str(tmp_path / "raw")], tmp_path, capsys)
    assert all(c.startswith("python -m ") for c in commands(one, "multiview_plugin.driver"))
    with pytest.raises(SystemExit, match="batch of 128 does not split evenly over 3"):
        dry_run(["nq", "mvr", "--gpus", "3", "--data_dir", str(tmp_path / "raw")], tmp_path, capsys)


def test_runner_runs_torchrun_for_several_processes(monkeypatch, capsys):
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, check: calls.append(argv) or argparse.Namespace(returncode=0))
    recipe_run.Runner()("multiview_plugin.driver.train", ["--output_dir", "m"], procs=4)
    assert calls == [[sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4", "-m",
                      "multiview_plugin.driver.train", "--output_dir", "m"]]
    assert capsys.readouterr().out.startswith("$ torchrun --nproc_per_node 4 -m multiview_plugin.driver.train ")
    monkeypatch.setattr(subprocess, "run", lambda argv, check: argparse.Namespace(returncode=1))
    with pytest.raises(SystemExit, match="step failed"):
        recipe_run.Runner()("multiview_plugin.driver.train", [], procs=2)


def test_plan_over_nodes_builds_one_index_per_node_and_searches_them_sharded(tmp_path, capsys):
    """issue 38: the 3-node plan for a 64 GB budget printed commands that build one index over everything. Now each
    node encodes its third of the shards into its own folder and builds its own index from them, and the search is
    one sharded search over the three on a Ray cluster."""
    out = dry_run(["nq", "mvr", "--ram_budget_gb", "64", "--data_dir", str(tmp_path / "raw")], tmp_path, capsys)
    nodes = int(re.search(r"nodes: (\d+), one shard index each", out).group(1))
    assert nodes == 3
    encodes = commands(out, "multiview_plugin.driver.encode")
    assert len(encodes) == 9  # the recipe's 8 shards raised to 3 per node
    for k in range(nodes):
        mine = [c for c in encodes if f"/emb/corpus/node{k}/corpus." in c]
        assert len(mine) == 3 and all("--dataset_number_of_shards 9" in c for c in mine)
    indexes = commands(out, "multiview_plugin.driver.index")
    assert len(indexes) == nodes
    for k, c in enumerate(indexes):
        assert f"/emb/corpus/node{k}/corpus.*.pkl" in c and f"--index_dir {tmp_path}/dry/index/corpus/node{k}" in c
        assert "--allow_partial" in c and "IVF65536_HNSW32,SQ8" in c
    (search,) = commands(out, "multiview_plugin.driver.search")
    parts = ",".join(f"{tmp_path}/dry/index/corpus/node{k}" for k in range(nodes))
    assert f"--index {parts} --ray_address auto " in search


@pytest.mark.parametrize("flag,value", [("--nodes", "1000000000"), ("--cores", "100000"), ("--gpus", "100000")])
def test_absurd_machine_is_refused(flag, value, tmp_path, capsys):
    """issue 38: --nodes 1000000000 printed "RAM 0 GB per node" (each node holding a fraction of a vector)."""
    with pytest.raises(SystemExit) as exited:
        recipe_run.main(["nq", "mvr", "--dry_run", flag, value, "--output_dir", str(tmp_path / "dry")])
    assert exited.value.code == 2
    assert f"{flag} {value}: plans consider at most" in capsys.readouterr().err


def test_smoke_recipe_over_two_nodes_runs_the_per_node_commands(tmp_path, capsys):
    """The per-node commands run end to end (smoke slice, --nodes 2): each node's shards encoded into its folder,
    one index per node, one sharded search over both (in this process: no --ray_address given), evaluated."""
    assert recipe_run.main(["squad", "dpr", "--smoke", "--nodes", "2", "--output_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for k in range(2):
        assert (tmp_path / "index" / "corpus" / f"node{k}" / "multiview.json").is_file()
        assert list((tmp_path / "emb" / "corpus" / f"node{k}").glob("corpus.*.pkl"))
    (search,) = commands(out, "multiview_plugin.driver.search")
    assert f"--index {tmp_path}/index/corpus/node0,{tmp_path}/index/corpus/node1 " in search
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["results"]


def test_dcsr_over_nodes_searches_by_max(tmp_path, capsys):
    """HasAns (dcsr's default) does not decompose over shard indexes, which the sharded search refuses: a dcsr plan
    over several nodes searches by max and says so."""
    out = dry_run(["nq", "dcsr", "--ram_budget_gb", "64", "--data_dir", str(tmp_path / "raw")], tmp_path, capsys)
    (search,) = commands(out, "multiview_plugin.driver.search")
    assert "--ray_address auto" in search and "--aggregation max" in search
    assert "hasans aggregation does not decompose over shard indexes" in out


def _invented_rates(dim: int = plan_mod.DIM) -> dict:
    """A bench/ivf_rates.json of invented rates (the test checks the pricing, not the machine)."""
    rates = [{"lists": lists, "dim": dim, "code": code, "us_per_vector": us * scale}
             for lists, us in ((2048, 30.0), (16384, 40.0), (131072, 60.0))
             for code, scale in (("SQ8", 1.0), ("SQfp16", 1.1), (f"PQ{dim // 8}", 2.0))]
    train = [{"lists": 2048, "kmeans_gflop": 100.0, "gflops_achieved": 50.0},
             {"lists": 16384, "kmeans_gflop": 100.0 * 8 ** 1.5, "gflops_achieved": 80.0}]
    return {"dim": dim, "add_rates": rates, "train": train, "train_fit": {"a": 1e-4, "b": 1.5}}


def test_build_is_priced_from_rates_measured_at_the_plans_dim_and_lists(tmp_path, monkeypatch):
    """bench/ivf_rates.json: the adds are n x the us per vector measured at the plan's lists (interpolated in
    log2(lists) between measured lists, the fewest measured's rate below them, None above the most) and the
    training a · nlist^b; the plan's build is their sum and names the file. Without that file, or for another dim,
    the plans keep bench/ivf_build.json's fit."""
    rates = _invented_rates()
    train, add, source = plan_mod.measured_build_seconds(rates, "SQ8", 131072, 1_000_000)
    assert train == pytest.approx(1e-4 * 131072 ** 1.5) and add == pytest.approx(60.0)
    assert "carried 8x past the most" in source and "131,072 lists: measured" in source
    # past the measured lists, a fit flatter than k-means' nlist^1.5 gives way to its FLOPs at the best rate measured
    flat = dict(rates, train_fit={"a": 1e-3, "b": 1.0})
    train, _, source = plan_mod.measured_build_seconds(flat, "SQ8", 131072, 1_000_000)
    assert train == pytest.approx(100.0 * 64 ** 1.5 / 80.0) and "GFLOP at 80.0 GFLOP/s" in source
    assert plan_mod.measured_build_seconds(flat, "SQ8", 16384, 1)[0] == pytest.approx(16.384)  # within: the fit
    _, add, source = plan_mod.measured_build_seconds(rates, "SQ8", 8192, 1_000_000)  # 2/3 of the way in log2
    assert add == pytest.approx(30.0 + 10.0 * 2 / 3) and "interpolated between 2,048 and 16,384 lists" in source
    _, add, source = plan_mod.measured_build_seconds(rates, "SQfp16", 1024, 1_000_000)
    assert add == pytest.approx(33.0) and "fewer lists not measured: the rate at 2,048" in source
    assert plan_mod.measured_build_seconds(rates, "SQ8", 262144, 1_000_000) is None
    path = tmp_path / "ivf_rates.json"
    path.write_text(json.dumps(rates))
    monkeypatch.setattr(plan_mod, "IVF_RATES", path)
    recipe = next(r for b, m, r in recipes() if (b, m) == ("nq", "mvr"))
    plan = plan_mod.make_plan("nq", "mvr", recipe)
    n = plan["vectors_per_node"]
    nlist = int(re.match(r"IVF(\d+)_", plan["index"]).group(1))
    train, add, _ = plan_mod.measured_build_seconds(rates, "SQ8", nlist, n)
    assert plan["build_h_1core"] == pytest.approx((train + add) / 3600, rel=1e-6)
    assert plan["build_source"].startswith("bench/ivf_rates.json (dim 768, one core)")
    path.write_text(json.dumps(_invented_rates(dim=384)))  # not the plans' dim: the dim-64 fit, as before
    assert plan_mod.make_plan("nq", "mvr", recipe)["build_source"].startswith("bench/ivf_build.json")


def _invented_search_rates(dim: int = plan_mod.DIM) -> dict:
    """A bench/ivf_search_rates.json of invented rates (the test checks the pricing, not the machine)."""
    coarse = [{"lists": lists, "nprobe": p, "ms_per_query": base * (1 + p / 256)}
              for lists, base in ((2048, 0.04), (131072, 0.16)) for p in (1, 16, 256)]
    scan = [{"code": code, "fetch": fetch, "us_per_code": us * (1 + fetch / 4000), "intercept_ms": fetch / 1000}
            for code, us in (("SQ8", 0.1), ("SQfp16", 0.2)) for fetch in (160, 1600, 4000)]
    checks = [{"fetch": fetch, "searcher_rest_ms": fetch / 4000} for fetch in (160, 1600, 4000)]
    return {"dim": dim, "views": 8, "coarse": coarse, "scan": scan, "checks": checks,
            "rescore": {"points": [{"candidates": c, "ms_per_query": c / 100} for c in (200, 1600, 4000)]}}


def test_ivf_search_is_priced_from_its_measured_parts(tmp_path, monkeypatch):
    """bench/ivf_search_rates.json: the HNSW quantiser at nprobe (interpolated in log nprobe and log lists), the
    codes of the probed lists at the fetch depth's rate plus its rest, at most one re-scored candidate per fetched
    vector (at the widths measured, in documents of the bench's views) and the searcher's own rest at the fetch
    depth; nprobe is the searcher's floor. Outside the lists, nprobe or fetch measured: None, and the plan keeps
    bench/ann.json's projection."""
    from multiview_plugin.search._searcher import ApproximateSearch, nprobe_floor
    from multiview_plugin.search.aggregators import HasAnsAggregator

    rates = _invented_search_rates()
    knobs = ApproximateSearch()
    assert (plan_mod.SEARCH_OVERFETCH, plan_mod.PROBE_FACTOR) == (knobs.overfetch, knobs.probe_factor)
    n, nlist = 168_000_000, 131072
    fetch = plan_mod.search_fetch(100, 8, max_aggregation=True)
    hasans = HasAnsAggregator(mean_sentences=4.86).initial_fetch(100, 4.86)  # the searcher's, before its over-fetch
    assert fetch == 1600 and plan_mod.search_fetch(100, 4.86, max_aggregation=False) == math.ceil(hasans * 2.0)
    nprobe = nprobe_floor(fetch, n, nlist, knobs.probe_factor)
    ms, source, _ = plan_mod.ivf_search_ms(rates, "SQ8", nlist, n, 8, 100, True, rescored=True)
    codes = nprobe * n / nlist
    t = math.log(nprobe / 16) / math.log(256 / 16)  # the quantiser: between nprobe 16 and 256, in log nprobe
    coarse = 0.16 * (1 + 16 / 256) + t * 0.16 * (256 - 16) / 256
    expected = coarse + 1.6 + codes * 0.1 * 1.4 / 1000 + 0.4 + 1600 / 100
    assert ms == pytest.approx(expected, rel=1e-3)
    assert f"nprobe {nprobe} at 131,072 lists" in source and "at most 1,600 candidate documents" in source
    ms_codes_alone, source, _ = plan_mod.ivf_search_ms(rates, "SQfp16", nlist, n, 8, 100, True, rescored=False)
    assert "re-scored" not in source and ms_codes_alone < ms + 1.0
    assert plan_mod.ivf_search_ms(rates, "SQ8", 262144, n, 8, 100, True, True) is None  # lists not measured
    assert plan_mod.ivf_search_ms(rates, "SQ8", nlist, n, 8, 1000, True, True) is None  # fetch 16,000
    assert plan_mod.ivf_search_ms(rates, "PQ96", nlist, n, 8, 100, True, True) is None  # codes not measured
    path = tmp_path / "ivf_search_rates.json"
    path.write_text(json.dumps(rates))
    monkeypatch.setattr(plan_mod, "IVF_SEARCH", path)
    recipe = next(r for b, m, r in recipes() if (b, m) == ("nq", "mvr"))
    plan = plan_mod.make_plan("nq", "mvr", recipe)
    assert plan["index"].startswith("IVF131072_HNSW32,SQ8")
    assert plan["latency_source"].startswith("bench/ivf_search_rates.json (dim 768, one thread)")
    path.write_text(json.dumps(_invented_search_rates(dim=384)))  # not the plans' dim: bench/ann.json's projection
    assert plan_mod.make_plan("nq", "mvr", recipe)["latency_source"].startswith("bench/ann.json projection")


def test_a_store_larger_than_the_ram_left_is_priced_partly_cold(tmp_path, monkeypatch):
    """The fp16 re-scoring store's share beyond the RAM left beside the index and the row map is priced at
    bench/rescore_cold.json's re-scoring from a store not in memory (candidates spread evenly); where it fits,
    unchanged; where bench/rescore_cold.json is absent, the same share said to be not measured."""
    option = {"index_ram": 100e9, "latency_ms": 10.0, "latency_source": "parts",
              "rescore": {"docs": 1600.0, "ms": 4.0, "bytes": 19_660_800}}
    n = 100_000_000  # store 153.6 GB; row map n x DOCID_MAP_BYTES_PER_ROW
    left = 256e9 - 100e9 - n * plan_mod.DOCID_MAP_BYTES_PER_ROW
    share = 1 - left / (n * plan_mod.DIM * 2)
    cold = {"dim": plan_mod.DIM, "disk": {"device": "vda", "read_ahead_kb": "8192"},
            "points": [{"candidates": c, "ms": {"random+prefetch": c / 40}} for c in (200, 1600, 4000)]}
    priced = plan_mod.cold_store(option, n, 256.0, cold)
    assert priced["latency_ms"] == pytest.approx(10.0 + share * (40.0 - 4.0))
    assert f"{share:.0%} of its reads from disk" in priced["latency_source"]
    assert plan_mod.cold_store(option, n, 10_000.0, cold) == {}  # the store fits the RAM left
    assert plan_mod.cold_store({**option, "rescore": None}, n, 256.0, cold) == {}  # no store
    unmeasured = plan_mod.cold_store(option, n, 256.0, None)
    assert "latency_ms" not in unmeasured and unmeasured["latency_source"].endswith("at most): not measured")
    path = tmp_path / "rescore_cold.json"
    path.write_text(json.dumps(cold))
    monkeypatch.setattr(plan_mod, "RESCORE_COLD", path)
    recipe = next(r for b, m, r in recipes() if (b, m) == ("nq", "mvr"))
    plan = plan_mod.make_plan("nq", "mvr", recipe)  # 258 GB of store beside a 132 GB index in 256 GB
    assert "of its reads from disk" in plan["latency_source"] and "bench/rescore_cold.json" in plan["latency_source"]
    roomy = plan_mod.make_plan("nq", "mvr", recipe, nodes=2)  # fp16 codes alone fit a node: no store
    assert "reads from disk" not in roomy["latency_source"]


def test_latency_budget_takes_more_nodes_where_none_of_the_fewest_meets_it():
    """Without --nodes, a latency budget that no index on the fewest nodes meets takes the fewest nodes on which
    one does (nq mvr: one node's re-scoring store is mostly read from disk); with --nodes given, the count stays and
    the plan says it is over."""
    mvr = next(r for b, m, r in recipes() if (b, m) == ("nq", "mvr"))
    one = plan_mod.make_plan("nq", "mvr", mvr)
    assert one["nodes"] == 1 and one["ms_per_query"] > 5
    spread = plan_mod.make_plan("nq", "mvr", mvr, max_ms=5.0)
    assert spread["nodes"] > 1 and spread["ms_per_query"] <= 5 and spread["ram_gb"] <= 256
    assert plan_mod.make_plan("nq", "mvr", mvr, nodes=spread["nodes"] - 1, max_ms=5.0)["ms_per_query"] > 5
    line = plan_mod.plan_line(spread)
    assert "and the latency budget of 5 ms/query" in line and "within the latency budget of 5 ms/query" in line
    pinned = plan_mod.make_plan("nq", "mvr", mvr, nodes=1, max_ms=5.0)
    assert pinned["nodes"] == 1 and "over the latency budget of 5 ms/query" in plan_mod.plan_line(pinned)


def test_latency_budget_trades_exact_flat_for_the_fastest_index_that_fits(tmp_path, capsys):
    """--max_ms_per_query: exact Flat only within the budget (nq dpr's Flat scans 21M vectors a query), else the
    fastest index that fits the RAM budget; a budget nothing meets keeps the fastest and says it is over."""
    recipe = next(r for b, m, r in recipes() if (b, m) == ("nq", "dpr"))
    exact = plan_mod.make_plan("nq", "dpr", recipe)
    assert exact["index"] == "Flat" and exact["ms_per_query"] > 100
    fast = plan_mod.make_plan("nq", "dpr", recipe, max_ms=100.0)
    assert fast["index"] != "Flat" and fast["ms_per_query"] <= 100 and fast["ram_gb"] <= 256
    assert "within the latency budget of 100 ms/query" in plan_mod.plan_line(fast)
    mvr = next(r for b, m, r in recipes() if (b, m) == ("nq", "mvr"))
    tight = plan_mod.make_plan("nq", "mvr", mvr, max_ms=0.001)
    assert "over the latency budget of 0.001 ms/query: the fastest index that fits" in plan_mod.plan_line(tight)
    assert recipe_run.main(["nq", "dpr", "--dry_run", "--output_dir", str(tmp_path), "--max_ms_per_query", "100"]) == 0
    assert "within the latency budget of 100 ms/query" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        recipe_run.main(["nq", "dpr", "--dry_run", "--output_dir", str(tmp_path), "--max_ms_per_query", "0"])
