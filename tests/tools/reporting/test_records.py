"""tools.reporting.records: a run's settings from its recorded command, rows of one system over seeds,
and paired tests against dpr of the same setting and seed."""

import json
from pathlib import Path

from tools.reporting import records, tables

ROOT = Path(__file__).resolve().parents[3]
CMD = ("python -m multiview_plugin.quickstart --data squad --squad_path x.json --steps 100 --dev_groups 28-31 "
       "--dev_eval_steps 25 --passage_max_len 192 --systems dpr dcsr-mean")


def row(system, top1_ranks, **extra):
    n = len(top1_ranks)
    return {"system": system, "answer_Top1": 100.0 * sum(r == 0 for r in top1_ranks) / n,
            "per_query": {"outcome": "answer", "depth": 20, "ranks": top1_ranks}, **extra}


def write(folder, name, command, rows, recorded):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"name": name, "command": command, "recorded": recorded,
                                                     "rows": rows}))


def test_seeds_are_aggregated_and_p_values_computed_across_records(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RESULTS", tmp_path)
    base = [0] * 50 + [-1] * 50
    better = [0] * 90 + [-1] * 10  # wins 40 questions, loses none
    same = list(base)
    # seed 42: one run with a p-value made by the quickstart; seed 7: dpr and the method in separate records,
    # so the table computes the test from their per-question outcomes
    write(tmp_path / "squad", "a", CMD, [row("dpr", base), row("dcsr-mean", better, p_value=1e-4, p_delta=40.0,
                                                                p_test="paired randomization")], "2026-01-01 00:00:00")
    write(tmp_path / "squad", "b", CMD + " --systems dpr '--train_flags=--seed 7' --tag=-seed7",
          [row("dpr-seed7", base)], "2026-01-02 00:00:00")
    write(tmp_path / "squad", "c", CMD + " --systems dcsr-mean mvr-residual '--train_flags=--seed 7' --tag=-seed7",
          [row("dcsr-mean-seed7", better), row("mvr-residual-seed7", same)], "2026-01-03 00:00:00")
    groups = {g["system"]: g for g in records.seed_groups("squad")}
    assert set(groups["dcsr-mean"]["seeds"]) == {7, 42} and set(groups["dpr"]["seeds"]) == {7, 42}
    t7 = groups["dcsr-mean"]["tests"][7]
    assert t7["p_value"] == 1 / 10_001 and t7["p_delta"] == 40.0
    assert groups["mvr-residual"]["tests"][7]["p_value"] == 1.0  # identical outcomes
    text = tables.significance_table("squad")
    line = next(x for x in text.splitlines() if x.startswith("| **dcsr-mean"))
    assert "7, 42 (n = 2)" in line and "**90.0 ± 0.0**" in line and "| yes |" in line
    mvr = next(x for x in text.splitlines() if x.startswith("| mvr-residual"))
    assert "| no |" in mvr and "+0.0" in mvr
    # another setting (300 steps) is a different row, never averaged with the 100-step seeds
    write(tmp_path / "squad", "d", CMD.replace("--steps 100", "--steps 300"), [row("dcsr-mean", base)],
          "2026-01-04 00:00:00")
    assert sum(g["system"] == "dcsr-mean" for g in records.seed_groups("squad")) == 2


def test_transfer_runs_are_their_own_setting_and_table(tmp_path, monkeypatch):
    """A SQuAD-trained dpr evaluated on SciFact (--models_from) is neither a seed of SciFact's in-domain dpr nor
    its baseline: transfer rows pair with the transfer dpr and render in their own table."""
    monkeypatch.setattr(records, "RESULTS", tmp_path)
    sci = ("python -m multiview_plugin.quickstart --data scifact --beir_dir x --steps 100 --passage_max_len 192 "
           "--systems dpr dcsr-mean")
    base, better = [0] * 50 + [-1] * 50, [0] * 90 + [-1] * 10
    write(tmp_path / "scifact", "in", sci + " '--train_flags=--seed 7' --tag=-seed7",
          [row("dpr-seed7", better, steps=100, **{"nDCG@10": 70.0})], "2026-01-01 00:00:00")
    write(tmp_path / "scifact", "tr-dpr", sci + " --models_from runs/squad-a --tag=-from-squad",
          [row("dpr-from-squad", base, transfer_from="runs/squad-a/models/dpr/best", steps=100, **{"nDCG@10": 60.0})],
          "2026-01-02 00:00:00")
    write(tmp_path / "scifact", "tr-dcsr", sci + " --models_from runs/squad-b --tag=-from-squad",
          [row("dcsr-mean-from-squad", better, transfer_from="runs/squad-b/models/dcsr-mean/best",
               steps=100, **{"nDCG@10": 65.0})], "2026-01-03 00:00:00")
    groups = records.seed_groups("scifact")
    dprs = [g for g in groups if g["system"] == "dpr"]
    assert len(dprs) == 2 and sorted(len(g["seeds"]) for g in dprs) == [1, 1]  # not pooled as two seeds
    dcsr = next(g for g in groups if g["system"] == "dcsr-mean")
    assert dcsr["setting"][-1] == "squad" and dcsr["tests"][42]["p_delta"] == 40.0  # against the transfer dpr
    assert [r["name"] for r in records.records("scifact", False)] == ["in"]
    transfer = tables.table("scifact", False, write_plot=False, transfer=True)
    assert transfer.startswith("**Zero-shot transfer to SciFact (BEIR): models trained on SQuAD-dev")
    assert "`tr-dpr`" in transfer and "`tr-dcsr`" in transfer and "`in`" not in transfer
    assert "(zero-shot transfer)" in tables.significance_table("scifact")
    # the README's summary: one row per system and source budget, seeds aggregated, tests per seed
    write(tmp_path / "scifact", "tr-7", sci + " --models_from runs/squad-c '--train_flags=--seed 7' "
          "--tag=-seed7-from-squad", [row("dpr-seed7-from-squad", base, transfer_from="runs/squad-c/models/dpr/best",
                                          **{"nDCG@10": 62.0}),
                                      row("dcsr-mean-seed7-from-squad", better, **{"nDCG@10": 67.0},
                                          transfer_from="runs/squad-c/models/dcsr-mean/best")], "2026-01-04 00:00:00")
    summary = tables.transfer_summary("scifact").splitlines()
    dcsr_line = next(x for x in summary if "`tr-dcsr`" in x)
    assert "| 100 | 7, 42 | 66.0 ± 1.4 | 90.0, 90.0 | 50.0, 50.0 | +40.0, +40.0 |" in dcsr_line
    assert "`tr-7`, `tr-dcsr`" in dcsr_line
    assert dcsr_line.startswith("| **") and sum("`tr-7`" in x for x in summary) == 2  # one row per system


def test_per_seed_tests_are_listed_in_the_seeds_order(tmp_path, monkeypatch):
    """The README lists seeds "7, 42" beside Δ and p per seed: each list in seed order, whatever order the records
    came in (seed 42's record first here; the tables once printed its Δ first, beside seed 7)."""
    monkeypatch.setattr(records, "RESULTS", tmp_path)
    base = [0] * 50 + [-1] * 50
    write(tmp_path / "squad", "a", CMD, [row("dpr", base), row("dcsr-mean", [0] * 90 + [-1] * 10)],
          "2026-01-01 00:00:00")
    write(tmp_path / "squad", "b", CMD + " '--train_flags=--seed 7' --tag=-seed7",
          [row("dpr-seed7", base), row("dcsr-mean-seed7", [0] * 60 + [-1] * 40)], "2026-01-02 00:00:00")
    g = next(g for g in records.seed_groups("squad") if g["system"] == "dcsr-mean")
    assert list(g["seeds"]) == [7, 42] and list(g["tests"]) == [7, 42]
    tested, _ = records.tested_win(g)
    assert [round(t["p_delta"]) for t in tested.values()] == [10, 40]


def test_a_shared_flag_ablation_is_shown_beside_the_dpr_it_is_tested_against():
    """An ablation of a shared train flag (e.g. the annealed temperature) has no dpr of its own setting: the
    headline's dpr column shows the dpr its test used (the plain one of that budget), not "–"."""
    setting = ("squad", 100, "28-31", 25, 0, 192, 16, 2e-05, "all-MiniLM-L6-v2", 10, "cpu",
               "--temperature_schedule annealed --mvr_alpha 1.0", "")
    candidates = records.baseline_settings(setting)
    assert candidates[0] == setting
    assert candidates[1][-2] == "--temperature_schedule annealed"  # --mvr_* never applies to dpr
    assert candidates[2][-2] == ""


def test_settings_come_from_the_recorded_command():
    s = records.quickstart_settings("python -m multiview_plugin.quickstart --data scifact --beir_dir x --steps 7 "
                                    "--batch_size 8")
    assert (s.data, s.steps, s.batch_size, s.learning_rate) == ("scifact", 7, 8, 2e-5)
    for record in (ROOT / "results").glob("*/*.json"):
        assert records.record_settings(json.loads(record.read_text()))


PEER_CMD = "python bench/colbert_peer.py --squad_path x.json --steps 100 --dev_groups 28-31 --dev_eval_steps 25"
PROTOCOL = ("python -m multiview_plugin.quickstart --data squad --squad_path x.json --steps 100 --dev_groups 28-31 "
            "--dev_eval_steps 25 --passage_max_len 192 --systems dpr")
