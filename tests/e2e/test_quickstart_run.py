"""The quickstart runner end to end (train → encode → index → search → evaluate) on a tiny backbone."""

import json

from multiview_plugin.quickstart.__main__ import main


def test_quickstart_runs_and_reports(tiny_bert, tmp_path, capsys):
    out = tmp_path / "qs"
    rc = main(["--backbone", str(tiny_bert), "--output_dir", str(out), "--steps", "2", "--batch_size", "4",
               "--passage_max_len", "64", "--data", "entities", "--systems", "minilm-zero-shot", "dpr", "mvr", "dcsr",
               "dce"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| system | steps | vectors/doc | MRR@10 | R@5 | top-1 | Δ top-1 vs dpr | wins/losses | p | vs |" in printed
    rows = {r["system"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(rows) == {"minilm-zero-shot", "dpr", "mvr", "dcsr", "dcsr (max)", "dce"}
    assert rows["mvr"]["views"] == 8 and rows["mvr"]["vectors"] == 8 * 148
    assert rows["dpr"]["views"] == 1 and "PPL" not in rows["dpr"]
    assert 1.0 <= rows["mvr"]["PPL"] <= 8.0 and rows["mvr"]["LV"] >= 0.0
    # dcsr: one vector per sentence, ranked by HasAns and, in a second row, by its best sentence
    assert rows["dcsr"]["aggregation"] == "hasans" and rows["dcsr (max)"]["aggregation"] == "max"
    assert rows["dcsr"]["views_per_doc"] > 1 and rows["dcsr"]["sentences"]["passages"] == 148
    assert (out / "runs" / "dcsr(max).trec").is_file()
    # dce: one view per pseudo-query (here each passage's first sentences)
    lines = (out / "data" / "sentence_queries.jsonl").read_text().splitlines()
    assert len(lines) == 148 and rows["dce"]["vectors"] == sum(len(json.loads(x)["queries"]) for x in lines)
    assert rows["dce"]["views_per_doc"] > 1
    for r in rows.values():
        assert 0.0 <= r["R@1"] <= r["R@5"] <= r["R@20"] <= 100.0
        assert 0.0 <= r["answer_Top1"] <= r["answer_Top20"] <= 100.0
    assert (out / "runs" / "mvr.trec").is_file() and (out / "indexes" / "mvr" / "multiview.json").is_file()
    # every row says where it ran (CI: no GPU)
    import torch

    expected = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    assert {r["device"] for r in rows.values()} == {expected}


def test_quickstart_defaults_are_the_mean_pooled_multiview_forms(tiny_bert, tmp_path):
    out = tmp_path / "qs"
    assert main(["--backbone", str(tiny_bert), "--output_dir", str(out), "--steps", "2", "--batch_size", "4",
                 "--passage_max_len", "64", "--data", "entities"]) == 0
    rows = {r["system"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(rows) == {"minilm-zero-shot", "dpr", "dcsr-mean", "dcsr-mean (max)", "mvr-residual"}
    config = json.loads((out / "models" / "mvr-residual" / "multiview_config.json").read_text())
    assert config["options"]["mvr_views"] == "residual" and config["pooling"] == "mean"
    config = json.loads((out / "models" / "dcsr-mean" / "multiview_config.json").read_text())
    assert config["options"]["dcsr_sentence_pooling"] == "mean"
    # every trained system records its training curve (loss per logged step)
    assert all(r["curves"]["loss"] for r in rows.values() if r["steps"])


def test_quickstart_train_flags_and_tag_reach_the_trained_model(tiny_bert, tmp_path):
    out = tmp_path / "qs"
    assert main(["--backbone", str(tiny_bert), "--output_dir", str(out), "--steps", "2", "--batch_size", "4",
                 "--passage_max_len", "64", "--data", "entities", "--systems", "dpr",
                 "--train_flags=--mask_duplicate_positives", "--tag=-masked"]) == 0
    rows = {r["system"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(rows) == {"dpr-masked"} and rows["dpr-masked"]["train_flags"] == "--mask_duplicate_positives"
    config = json.loads((out / "models" / "dpr-masked" / "multiview_config.json").read_text())
    assert config["mask_duplicate_positives"] is True


def test_quickstart_hybrid_rows_per_question_outcomes_and_p_values(tiny_bert, tmp_path):
    out = tmp_path / "qs"
    assert main(["--backbone", str(tiny_bert), "--output_dir", str(out), "--steps", "2", "--batch_size", "4",
                 "--passage_max_len", "64", "--data", "entities", "--systems", "bm25", "dpr", "dcsr-mean", "--hybrid",
                 "--hybrid_alpha", "0.3", "--significance_permutations", "200"]) == 0
    rows = {r["system"]: r for r in json.loads((out / "results.json").read_text())}
    assert set(rows) == {"bm25", "dpr", "dpr+bm25", "dpr+bm25 (rrf)", "dcsr-mean", "dcsr-mean (max)",
                         "dcsr-mean+bm25", "dcsr-mean+bm25 (rrf)"}
    # no dev split in the embedded data: the fixed alpha, said so
    assert rows["dpr+bm25"]["hybrid_alpha"] == 0.3 and rows["dpr+bm25"]["hybrid_alpha_source"].startswith("fixed")
    assert rows["dcsr-mean+bm25 (rrf)"]["fusion"] == "rrf" and rows["dcsr-mean+bm25"]["views_per_doc"] > 1
    n = rows["dpr"]["eval_queries"]
    for name, r in rows.items():
        ranks = r["per_query"]["ranks"]
        assert r["per_query"]["outcome"] == "answer" and len(ranks) == n and all(-1 <= x < 20 for x in ranks)
        # the stored ranks are the reported accuracy
        assert abs(100.0 * sum(x == 0 for x in ranks) / n - r["answer_Top1"]) < 1e-9
        if name == "dpr":
            assert "p_value" not in r
        else:
            assert 0.0 < r["p_value"] <= 1.0 and r["p_baseline"] == "dpr" and "randomization" in r["p_test"]
            assert abs(r["p_delta"] - (r["answer_Top1"] - rows["dpr"]["answer_Top1"])) < 1e-9
    assert rows["dpr"]["seed"] == 42
    differing = [r for r in rows.values() if "p_test" in r and "sign flips" in r["p_test"]]
    # --significance_permutations reaches the test
    assert differing and all("200 sign flips" in r["p_test"] for r in differing)
    # fusion changes the ranking: the hybrid is neither side's run
    assert rows["dpr+bm25"]["per_query"]["ranks"] != rows["dpr"]["per_query"]["ranks"] or \
        rows["dpr+bm25"]["per_query"]["ranks"] != rows["bm25"]["per_query"]["ranks"]


def test_hybrid_alpha_is_chosen_on_dev_from_the_grid(tmp_path):
    from multiview_plugin.quickstart.__main__ import EvalData, Hybrid, hybrid_rows

    # dev: the dense model ranks the gold passage 2nd, BM25 ranks it 1st -> low alphas win on dev
    (tmp_path / "dev_qrels.tsv").write_text("dq1 0 g1 1\ndq2 0 g2 1\n")
    dev_dense = {"dq1": [("x", 0.9), ("g1", 0.8), ("y", 0.1)], "dq2": [("x", 0.9), ("g2", 0.85), ("y", 0.2)]}
    dev_bm25 = {"dq1": [("g1", 5.0), ("y", 1.0)], "dq2": [("g2", 7.0), ("x", 2.0)]}
    eval_dense = {"q1": [("a", 0.9), ("b", 0.5)]}
    eval_bm25 = {"q1": [("b", 3.0), ("a", 1.0)]}
    data = EvalData(corpus={"a": "A", "b": "B"}, passages={"a": ("", "alpha text"), "b": ("", "beta text")},
                    queries={"q1": "which?"}, qrels={"q1": {"b": 1}}, answers={"q1": ["beta"]})
    files = {"dev_qrels": tmp_path / "dev_qrels.tsv"}
    rows = {r["system"]: r for r in hybrid_rows("m", eval_dense, dev_dense, Hybrid(eval_bm25, dev_bm25,
                                                                                    [0.0, 0.4, 1.0], 0.9),
                                                files, data)}
    assert rows["m+bm25"]["hybrid_alpha"] == 0.4 and rows["m+bm25"]["hybrid_alpha_source"] == "dev MRR@10"
    assert [a for a, _ in rows["m+bm25"]["hybrid_dev_sweep"]] == [0.0, 0.4, 1.0]
    assert rows["m+bm25"]["hybrid_dev_sweep"][2][1] < rows["m+bm25"]["hybrid_dev_sweep"][1][1]
    assert rows["m+bm25"]["answer_Top1"] == 100.0 and rows["m+bm25"]["per_query"]["ranks"] == [0]
    # the grid decides: with only alpha 1 on offer, the dense order is kept (and misses the answer at top-1)
    only_dense = hybrid_rows("m", eval_dense, dev_dense, Hybrid(eval_bm25, dev_bm25, [1.0], 0.9), files, data)
    assert only_dense[0]["hybrid_alpha"] == 1.0 and only_dense[0]["per_query"]["ranks"] == [1]
    # without a dev run: the fixed alpha
    fixed = hybrid_rows("m", eval_dense, None, Hybrid(eval_bm25, None, [0.0, 1.0], 0.9), files, data)
    assert fixed[0]["hybrid_alpha"] == 0.9 and fixed[0]["hybrid_alpha_source"].startswith("fixed")
    assert fixed[1]["system"] == "m+bm25 (rrf)" and fixed[1]["fusion"] == "rrf"


def test_models_from_evaluates_another_runs_models_without_training(tiny_bert, tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    common = ["--backbone", str(tiny_bert), "--steps", "2", "--batch_size", "4", "--passage_max_len", "64",
              "--data", "entities", "--systems", "minilm-zero-shot", "dpr"]
    assert main([*common, "--output_dir", str(first)]) == 0
    assert main([*common, "--output_dir", str(second), "--models_from", str(first), "--tag=-moved"]) == 0
    a = {r["system"]: r for r in json.loads((first / "results.json").read_text())}
    b = {r["system"]: r for r in json.loads((second / "results.json").read_text())}
    assert b["dpr-moved"]["transfer_from"] == str(first / "models" / "dpr") and b["dpr-moved"]["train_s"] == 0.0
    assert not (second / "models" / "dpr-moved").exists()  # nothing trained
    assert b["dpr-moved"]["per_query"] == a["dpr"]["per_query"]  # the same model on the same data
    assert "transfer_from" not in b["minilm-zero-shot-moved"]  # untrained systems are built as always
    assert main([*common, "--output_dir", str(tmp_path / "c"), "--models_from", str(tmp_path / "none")]) == 2
    assert "no model of 'dpr'" in capsys.readouterr().err


def test_the_default_run_is_the_squad_slice_one_vector_against_views_untrained(tiny_bert, tmp_path, capsys):
    """Issue 37: the default data is the SQuAD v1.1 dev slice shipped with the package (712 held-out questions
    over 277 paragraphs): dpr-zero-shot against the untrained multi-view rows, each tested against it; the record
    holds no path of the machine; the run says where the models are and how to load one."""
    out = tmp_path / "qs"
    assert main(["--backbone", str(tiny_bert), "--output_dir", str(out), "--passage_max_len", "64",
                 "--significance_permutations", "200"]) == 0
    printed = capsys.readouterr().out
    text = (out / "results.json").read_text()
    rows = {r["system"]: r for r in json.loads(text)}
    assert list(rows) == ["dpr-zero-shot", "segment-means-zero-shot", "dcsr-mean-zero-shot",
                          "dcsr-mean-zero-shot (max)"]
    assert {(r["data"], r["eval_queries"], r["corpus"], r["train_queries"], r["steps"]) for r in rows.values()} \
        == {("squad-slice", 712, 277, 1169, 0)}
    assert rows["segment-means-zero-shot"]["views"] == 8 and "p_value" not in rows["dpr-zero-shot"]
    for name in ("segment-means-zero-shot", "dcsr-mean-zero-shot", "dcsr-mean-zero-shot (max)"):
        assert rows[name]["p_baseline"] == "dpr-zero-shot"
        assert rows[name]["p_wins"] - rows[name]["p_losses"] == round(rows[name]["p_delta"] * 712 / 100)
    # no absolute path: view_info's corpus and the encode input are relative to --output_dir
    assert str(tmp_path) not in text and rows["dpr-zero-shot"]["input"]["source"] == "data/corpus.jsonl"
    assert rows["dpr-zero-shot"]["view_info"]["corpus"] == ["data/corpus.jsonl"]
    assert "segment-means-zero-shot: 8 views" in printed and "total wall time" in printed
    assert f"models: {out / 'models'}/<system>" in printed
    # the printed Python lines run as printed, on the model the run saved
    hint = printed.split("use one from Python:\n", 1)[1].splitlines()[:4]
    assert f"MultiViewModel.load({str(out / 'models' / 'segment-means-zero-shot')!r}, device='cpu')" in hint[1]
    exec("\n".join(line.strip() for line in hint), {})
    assert capsys.readouterr().out.strip() in ("d1", "d2") and (out / "demo-index").is_dir()


def test_untrained_rows_are_tested_against_dpr_zero_shot_and_trained_rows_against_dpr():
    from multiview_plugin.quickstart.__main__ import add_significance, baseline_of

    assert baseline_of({"steps": 0}, {"dpr-zero-shot", "dpr"}) == "dpr-zero-shot"
    assert baseline_of({"steps": 0}, {"minilm-zero-shot", "dpr"}) == "dpr"  # the run has no untrained dpr row
    assert baseline_of({"steps": 100}, {"dpr-zero-shot", "dpr"}) == "dpr"
    assert baseline_of({"steps": 0}, {"dpr-zero-shot-x"}, "-x") == "dpr-zero-shot-x"

    def row(system, steps, ranks):
        return {"system": system, "steps": steps, "per_query": {"outcome": "answer", "ranks": ranks}}

    rows = [row("dpr-zero-shot", 0, [0, 1, 1, 0]), row("views", 0, [0, 0, 0, 1]), row("dpr", 5, [0, 0, 0, 0]),
            row("views-tuned", 5, [1, 0, 0, 0])]
    add_significance(rows, num_permutations=100)
    assert (rows[1]["p_baseline"], rows[1]["p_wins"], rows[1]["p_losses"], rows[1]["p_delta"]) == \
        ("dpr-zero-shot", 2, 1, 25.0)
    assert (rows[3]["p_baseline"], rows[3]["p_wins"], rows[3]["p_losses"]) == ("dpr", 0, 1)
    assert "p_value" not in rows[0] and "p_value" not in rows[2]


def test_a_p_value_at_the_floor_of_the_randomization_test_prints_as_a_bound():
    from multiview_plugin.quickstart.__main__ import format_p

    flips = "paired randomization (two-sided, top-1 hits, 10000 sign flips, seed 0)"
    assert format_p({"p_value": 1 / 10001, "p_test": flips}) == "< 0.0001"
    assert format_p({"p_value": 3 / 10001, "p_test": flips}) == "0.0003"
    assert format_p({"p_value": 0.0625, "p_test": "paired randomization (exact over 32 sign patterns)"}) == "0.062"
    assert format_p({}) == ""


def test_the_api_hint_loads_a_saved_model_never_bm25_or_a_fused_row(tmp_path):
    from multiview_plugin.quickstart.__main__ import api_hint

    rows = [{"system": "bm25", "views_per_doc": 0}, {"system": "dpr+bm25", "views": 1, "views_per_doc": 1.0,
                                                     "hybrid": "bm25"},
            {"system": "dpr", "views": 1, "views_per_doc": 1.0}]
    assert f"load({str(tmp_path / 'models' / 'dpr')!r}" in api_hint(tmp_path, rows)[2]
    rows.append({"system": "dcsr-mean (max)", "views": 9, "views_per_doc": 4.5})
    assert f"load({str(tmp_path / 'models' / 'dcsr-mean')!r}" in api_hint(tmp_path, rows)[2]
    assert api_hint(tmp_path, rows[:1]) == []


def test_the_committed_quickstart_records_hold_no_machine_path():
    """Issue 37: the quickstart record stored the absolute temporary paths of the machine that made it (view_info's
    corpus, the encode input's source); the run now writes them relative to --output_dir."""
    from pathlib import Path

    def strings(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
        elif isinstance(value, str):
            yield value

    records = sorted((Path(__file__).resolve().parents[2] / "results" / "default").glob("quickstart-*.json"))
    assert records
    for path in records:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
        assert not [s for s in strings(rows) if s.startswith("/")], path.name
