"""tools.reporting.tables: the runs tables, the README's method (headline) and transfer tables."""

import json

import pytest

from tools.reporting import records, tables

PEER_CMD = "python bench/colbert_peer.py --squad_path x.json --steps 100 --dev_groups 28-31 --dev_eval_steps 25"
PROTOCOL = ("python -m multiview_plugin.quickstart --data squad --squad_path x.json --steps 100 --dev_groups 28-31 "
            "--dev_eval_steps 25 --passage_max_len 192 --systems dpr")


def test_a_peer_run_made_by_another_script_is_recorded_and_rendered(tmp_path, monkeypatch):
    """A record whose command is not the quickstart's (bench/colbert_peer.py) takes its settings from its
    ``protocol``; its row shows its own index size, a quickstart row's is vectors x 384 x 4 bytes."""
    monkeypatch.setattr(records, "RESULTS", tmp_path)
    monkeypatch.setattr(records, "ROOT", tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    peer = {"system": "colbert-pylate", "backbone": "all-MiniLM-L6-v2", "steps": 100, "best_step": 75,
            "views_per_doc": 131.0, "vectors": 270777, "index_bytes": 270777 * 128 * 4, "answer_Top1": 77.7}
    (run / "results.json").write_text(json.dumps([peer]))
    out = records.add(run, "squad-sel-peer", PEER_CMD, None, protocol=PROTOCOL)
    record = json.loads(out.read_text())
    assert out == tmp_path / "squad" / "squad-sel-peer.json"
    assert (record["command"], record["protocol"]) == (PEER_CMD, PROTOCOL)
    dpr = {"system": "dpr", "steps": 100, "best_step": 100, "views_per_doc": 1.0, "vectors": 2067,
           "answer_Top1": 70.4}
    (tmp_path / "squad" / "squad-sel-dpr.json").write_text(json.dumps(
        {"name": "squad-sel-dpr", "command": PROTOCOL, "recorded": "2026-01-01 00:00:00", "rows": [dpr]}))
    text = tables.table("squad", selected=True, write_plot=False)
    line = next(x for x in text.splitlines() if x.startswith("| colbert-pylate"))
    # batch 16 and the backbone come from the protocol; index MB from the row's own index_bytes
    assert "| 100 | 75 | 16 |" in line and "| 131.0 | 138.6 | 77.7 |" in line and "`squad-sel-peer`" in line
    line = next(x for x in text.splitlines() if x.startswith("| dpr"))
    assert "| 1.0 | 3.2 | 70.4 |" in line
    assert f"- `squad-sel-peer`: `{PEER_CMD}`" in text


def test_headline_table_marks_only_tested_significant_wins(tmp_path, monkeypatch):
    """The README's method table: a row with per-question ranks is tested against dpr of its setting and seed
    (bold when p < 0.05 and better); one without is 'not tested', never shown as a win."""
    monkeypatch.setattr(records, "RESULTS", tmp_path)
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
    monkeypatch.setattr(tables.P, "headline", [("better", "f", "squad-sel-x", "dcsr-mean"),
                                              ("plain", "f", "squad-sel-x", "dce"),
                                              ("dpr", "f", "squad-sel-x", "dpr")])
    lines = tables.headline_table("squad").splitlines()
    assert "| **90.0** | 50.0 | +40.0 |" in lines[2]
    assert "| 95.0 | 50.0 | – | not tested |" in lines[3]
    assert "| 50.0 | – | – | – |" in lines[4]
    monkeypatch.setattr(tables.P, "front", [("better", "f", "squad-sel-x", "dcsr-mean"),
                                           ("dpr", "f", "squad-sel-x", "dpr")])
    front = tables.front_table("squad").splitlines()
    assert front[0].count("|") == 9 and front[2] == "| better | f | 100 | 42 | **90.0** | +40.0 | < 0.0001 | 3.0 |"
    monkeypatch.setattr(tables.P, "front", [("dpr", "f", "squad-sel-x", "dpr")] * 9)
    with pytest.raises(SystemExit, match="at most 8"):
        tables.front_table("squad")
    monkeypatch.setattr(tables.P, "headline", [("gone", "f", "squad-sel-x", "missing")])
    with pytest.raises(SystemExit, match="no row 'missing' in record 'squad-sel-x'"):
        tables.headline_table("squad")


def test_an_ablation_is_tested_against_dpr_of_its_flags_or_else_plain_dpr(tmp_path, monkeypatch):
    """A run with an --mvr_* flag is tested against plain dpr of its budget and seed (method-only flags never apply
    to dpr); a run whose shared flag dpr also trained with is tested against that dpr."""
    monkeypatch.setattr(records, "RESULTS", tmp_path)
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
    tests = {g["setting"][-2]: g["tests"][42] for g in records.seed_groups("squad") if g["system"] == "mvr-residual"}
    assert tests["--mvr_balance_weight 0.1"]["p_delta"] == pytest.approx(30.0)  # against plain dpr
    assert tests["--mask_duplicate_positives"]["p_delta"] == pytest.approx(0.0)  # against the masked dpr


def test_records_say_which_gpu_they_ran_on():
    assert tables.ran_on({"rows": [{"device": "NVIDIA H100 80GB HBM3"}]}) == " (on NVIDIA H100 80GB HBM3)"
    assert tables.ran_on({"rows": [{"device": "cpu"}, {}]}) == ""


def cells(line: str) -> list[str]:
    return [c.strip().strip("*") for c in line.strip().strip("|").split("|")]


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split("(")[0].replace("−", "-").split(",") if x.strip() not in ("", "–")]


def test_the_headline_numbers_add_up():
    """Issue 31: each Δ is the row's top-1 minus the dpr top-1 shown beside it, per seed (rounded separately:
    within 0.1). The dpr column once showed a two-seed mean (79.1 against 70.5, Δ +9.0)."""
    lines = tables.headline_table("squad").splitlines()[2:]
    assert lines
    for line in lines:
        c = cells(line)
        values, dprs, deltas = floats(c[4]), floats(c[5]), floats(c[6])
        if not deltas:
            continue
        assert len(values) == len(dprs) == len(deltas), line
        for v, d, delta in zip(values, dprs, deltas):
            assert abs(v - d - delta) <= 0.1 + 1e-9, line


def test_the_transfer_table_shows_the_metric_it_tests():
    """Issue 31: the transfer table's Δ and p are on top-1 hits; the table shows the top-1 hits per seed and the
    dpr's, beside nDCG@10, and they add up to Δ."""
    lines = tables.transfer_summary("scifact").splitlines()
    assert "top-1 (per seed)" in lines[0] and "nDCG@10" in lines[0] and "p vs dpr, top-1" in lines[0]
    tested = 0
    for line in lines[2:]:
        c = cells(line)
        values, dprs, deltas = floats(c[4]), floats(c[5]), floats(c[6])
        for v, d, delta in zip(values, dprs, deltas):
            assert abs(v - d - delta) <= 0.1 + 1e-9, line
            tested += 1
    assert tested > 10


def test_a_p_value_at_its_permutation_floor_reads_as_below_it():
    """10,000 sign flips, none as extreme as the observed difference: p = 1/10,001, printed ``< 0.0001`` (issue 37);
    an exact test or a p above the floor prints its value."""
    sampled = "paired randomization (two-sided, top-1 hits, 10000 sign flips, seed 0)"
    assert tables.p_cell(1 / 10_001, sampled) == "< 0.0001"
    assert tables.p_cell(2 / 10_001, sampled) == "0.0002"
    assert tables.p_cell(0.8, sampled) == "0.8"
    assert tables.p_cell(1 / 10_001, "paired randomization (two-sided, top-1 hits, exact over 65536 sign patterns)") \
        == "0.0001"
    assert tables.p_cell(1 / 1000, "permutation test, 999 resamples") == "< 0.001"
    assert tables.p_cell(0.03) == "0.03"


def test_no_generated_table_prints_a_floor_p_value_as_a_value():
    """Every table in the pages prints a p-value at its test's floor as ``< 0.0001``, the quickstart's included."""
    row = {"system": "dcsr-mean", "p_value": 1 / 10_001, "p_delta": 6.1,
           "p_test": "paired randomization (two-sided, top-1 hits, 10000 sign flips, seed 0)"}
    keys = [k for k, _ in tables.P.quickstart_columns]
    if "p_value" in keys:
        cells = tables.quickstart_table({"rows": [row]}).splitlines()[-1].split(" | ")
        assert "< 0.0001" in cells
    for page in ("README.md", "docs/results.md"):
        text = (records.ROOT / page).read_text(encoding="utf-8")
        assert "| 0.0001 |" not in text and ", 0.0001 |" not in text and "| 0.0001, " not in text, page


def test_the_quickstart_table_writes_a_p_at_the_randomization_tests_floor_as_a_bound():
    """Issue 37: 1 / (N + 1) is the floor of an N-sign-flip Monte Carlo test, not a measured p ("< 0.0001")."""
    flips = "paired randomization (two-sided, top-1 hits, 10000 sign flips, seed 0)"
    rows = [{"system": "a", "p_value": 1 / 10001, "p_test": flips}, {"system": "b", "p_value": 2 / 10001,
                                                                      "p_test": flips},
            {"system": "c", "p_value": 0.0625, "p_test": "paired randomization (exact over 32 sign patterns)"}]
    cells = [line.split(" | ") for line in tables.quickstart_table({"rows": rows}).splitlines()[2:]]
    column = [h for _, h in tables.P.quickstart_columns].index("p vs dpr")
    assert [c[column] for c in cells] == ["< 0.0001", "0.0002", "0.062"]
