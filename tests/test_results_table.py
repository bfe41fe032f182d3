"""docs/results.md's tables and the README's quickstart table are exactly what bench/results.py renders from the
committed run records, and ``bench/results.py check`` says so, or names each line that differs."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "results.py")
results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results)


def test_tables_are_in_sync_with_results():
    assert results.check() == [], "tables are stale: run python bench/results.py render"
    assert results.main(["check"]) == 0


def test_check_names_each_line_that_differs(tmp_path, capsys):
    page, readme = tmp_path / "results.md", tmp_path / "README.md"
    text = results.RESULTS_PAGE.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| dpr (mean pooling)") and "| 70.4 |" in line)
    page.write_text(text.replace(row, row.replace("| 70.4 |", "| 71.4 |", 1)), encoding="utf-8")
    quick = results.README.read_text(encoding="utf-8")
    readme.write_text(quick.replace("| dpr | 40 | 1 | 90.4 |", "| dpr | 40 | 1 | 99.9 |"), encoding="utf-8")
    problems = results.check(page, readme, base=results.RESULTS_PAGE.parent)
    assert len(problems) == 2, problems
    assert "results.md" in problems[0] and "71.4" in problems[0] and "70.4" in problems[0]
    assert "README.md" in problems[1] and "99.9" in problems[1]
    assert results.main(["check", "--out", str(page), "--readme", str(readme)]) == 1
    assert len(capsys.readouterr().out.strip().splitlines()) >= 2


def test_render_is_byte_stable(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    page, readme = docs / "results.md", tmp_path / "README.md"
    shutil.copy(results.RESULTS_PAGE, page)
    shutil.copy(results.README, readme)
    for path, text in results.rendered(page, readme, write_plots=False, base=results.RESULTS_PAGE.parent).items():
        path.write_text(text, encoding="utf-8")
    assert page.read_text(encoding="utf-8") == results.RESULTS_PAGE.read_text(encoding="utf-8")
    assert readme.read_text(encoding="utf-8") == results.README.read_text(encoding="utf-8")


def test_settings_come_from_the_recorded_command():
    s = results.quickstart_settings("python -m multiview_plugin.quickstart --data scifact --beir_dir x --steps 7 "
                                    "--batch_size 8")
    assert (s.data, s.steps, s.batch_size, s.learning_rate) == ("scifact", 7, 8, 2e-5)
    for record in (ROOT / "results").glob("*/*.json"):
        assert results.record_settings(json.loads(record.read_text()))


PEER_CMD = "python bench/colbert_peer.py --squad_path x.json --steps 100 --dev_groups 28-31 --dev_eval_steps 25"
PROTOCOL = ("python -m multiview_plugin.quickstart --data squad --squad_path x.json --steps 100 --dev_groups 28-31 "
            "--dev_eval_steps 25 --passage_max_len 192 --systems dpr")


def test_a_peer_run_made_by_another_script_is_recorded_and_rendered(tmp_path, monkeypatch):
    """A record whose command is not the quickstart's (bench/colbert_peer.py) takes its settings from its
    ``protocol``; its row shows its own index size, a quickstart row's is vectors x 384 x 4 bytes."""
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "ROOT", tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    peer = {"system": "colbert-pylate", "backbone": "all-MiniLM-L6-v2", "steps": 100, "best_step": 75,
            "views_per_doc": 131.0, "vectors": 270777, "index_bytes": 270777 * 128 * 4, "answer_Top1": 77.7}
    (run / "results.json").write_text(json.dumps([peer]))
    out = results.add(run, "squad-sel-peer", PEER_CMD, None, protocol=PROTOCOL)
    record = json.loads(out.read_text())
    assert out == tmp_path / "squad" / "squad-sel-peer.json"
    assert (record["command"], record["protocol"]) == (PEER_CMD, PROTOCOL)
    dpr = {"system": "dpr", "steps": 100, "best_step": 100, "views_per_doc": 1.0, "vectors": 2067,
           "answer_Top1": 70.4}
    (tmp_path / "squad" / "squad-sel-dpr.json").write_text(json.dumps(
        {"name": "squad-sel-dpr", "command": PROTOCOL, "recorded": "2026-01-01 00:00:00", "rows": [dpr]}))
    text = results.table("squad", selected=True, write_plot=False)
    line = next(x for x in text.splitlines() if x.startswith("| colbert-pylate"))
    # batch 16 and the backbone come from the protocol; index MB from the row's own index_bytes
    assert "| 100 | 75 | 16 |" in line and "| 131.0 | 138.6 | 77.7 |" in line and "`squad-sel-peer`" in line
    line = next(x for x in text.splitlines() if x.startswith("| dpr"))
    assert "| 1.0 | 3.2 | 70.4 |" in line
    assert f"- `squad-sel-peer`: `{PEER_CMD}`" in text


def test_headline_table_marks_only_tested_significant_wins(tmp_path, monkeypatch):
    """The README's method table: a row with per-question ranks is tested against dpr of its setting and seed
    (bold when p < 0.05 and better); one without is 'not tested', never shown as a win."""
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    base = PROTOCOL.replace("--systems dpr", "--systems dpr dcsr-mean dce")
    ranks_dpr = [0] * 50 + [3] * 50           # 50 % top-1
    ranks_better = [0] * 90 + [3] * 10        # 90 % top-1: a win on 40 more questions, none worse
    rows = [{"system": "dpr", "steps": 100, "answer_Top1": 50.0,
             "per_query": {"outcome": "answer", "depth": 20, "ranks": ranks_dpr}},
            {"system": "dcsr-mean", "steps": 100, "answer_Top1": 90.0, "views_per_doc": 3.0,
             "per_query": {"outcome": "answer", "depth": 20, "ranks": ranks_better}},
            {"system": "dce", "steps": 100, "answer_Top1": 95.0, "views_per_doc": 2.0}]
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "squad-sel-x.json").write_text(json.dumps(
        {"name": "squad-sel-x", "command": base, "recorded": "2026-01-01 00:00:00", "rows": rows}))
    monkeypatch.setattr(results, "HEADLINE", [("better", "f", "squad-sel-x", "dcsr-mean"),
                                              ("plain", "f", "squad-sel-x", "dce"),
                                              ("dpr", "f", "squad-sel-x", "dpr")])
    lines = results.headline_table("squad").splitlines()
    assert "| **90.0** | 50.0 | +40.0 |" in lines[2]
    assert "| 95.0 | 50.0 | – | not tested |" in lines[3]
    assert "| 50.0 | – | – | – |" in lines[4]
    monkeypatch.setattr(results, "HEADLINE", [("gone", "f", "squad-sel-x", "missing")])
    with pytest.raises(SystemExit, match="no row 'missing' in record 'squad-sel-x'"):
        results.headline_table("squad")


def test_an_ablation_is_tested_against_dpr_of_its_flags_or_else_plain_dpr(tmp_path, monkeypatch):
    """A run with an --mvr_* flag is tested against plain dpr of its budget and seed (method-only flags never apply
    to dpr); a run whose shared flag dpr also trained with is tested against that dpr."""
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    (tmp_path / "squad").mkdir()
    pq = lambda ranks: {"outcome": "answer", "depth": 20, "ranks": ranks}  # noqa: E731
    plain, masked = [0] * 50 + [3] * 50, [0] * 80 + [3] * 20

    def write(name: str, systems: str, flags: str, rows: list[dict]) -> None:
        command = PROTOCOL.replace("--systems dpr", f"--systems {systems}")
        command += f" --train_flags='{flags}'" if flags else ""
        (tmp_path / "squad" / f"{name}.json").write_text(json.dumps(
            {"name": name, "command": command, "recorded": f"2026-01-01 00:00:0{len(name) % 10}", "rows": rows}))

    write("squad-sel-dpr", "dpr", "", [{"system": "dpr", "answer_Top1": 50.0, "per_query": pq(plain)}])
    write("squad-sel-masked", "dpr mvr-residual", "--mask_duplicate_positives",
          [{"system": "dpr", "answer_Top1": 80.0, "per_query": pq(masked)},
           {"system": "mvr-residual", "answer_Top1": 80.0, "per_query": pq(masked)}])
    write("squad-sel-lb", "mvr-residual", "--mvr_balance_weight 0.1",
          [{"system": "mvr-residual", "answer_Top1": 80.0, "per_query": pq(masked)}])
    tests = {g["setting"][-2]: g["tests"][42] for g in results.seed_groups("squad") if g["system"] == "mvr-residual"}
    assert tests["--mvr_balance_weight 0.1"]["p_delta"] == pytest.approx(30.0)  # against plain dpr
    assert tests["--mask_duplicate_positives"]["p_delta"] == pytest.approx(0.0)  # against the masked dpr
