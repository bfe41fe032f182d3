"""Tests of multiview_plugin/evaluation/dev_eval.py: model selection on a dev split during training."""

from __future__ import annotations

import json

from multiview_plugin.driver.train import main as train_main
from tests.conftest import write_topics_corpus

COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "48", "--seed", "7", "--dataloader_num_workers", "0"]


def dev_set_flags(tmp_path):
    """--dev_* flags of a 2-query dev set over the 6-passage topics corpus."""
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    queries = tmp_path / "dev.tsv"
    queries.write_text("a\twhat is paris\nb\twhat is the moon\n")
    qrels = tmp_path / "dev_qrels.txt"
    qrels.write_text("a 0 d0 1\nb 0 d4 1\n")
    return ["--dev_queries", str(queries), "--dev_qrels", str(qrels), "--dev_corpus", str(corpus)]


def test_dev_selection_saves_the_best_and_stops(tiny_bert, train_file, tmp_path):
    out = tmp_path / "run"
    assert train_main(["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(out), "--pooling", "mean", "--normalize",
                       "--learning_rate", "0", "--max_steps", "12", "--save_strategy", "no",
                       *dev_set_flags(tmp_path), "--dev_eval_steps", "2", "--dev_patience", "2", *COMMON]) == 0
    curve = json.loads((out / "dev_curve.json").read_text())
    # learning rate 0: the dev metric never improves after step 0, so training stops after 2 more checks
    assert [p["step"] for p in curve["curve"]] == [0, 2, 4]
    assert curve["best_step"] == 0 and (out / "best" / "multiview_config.json").is_file()
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("dev_MRR@10" in h for h in history)


def test_dev_metric_picks_what_is_selected_on(tiny_bert, train_file, tmp_path):
    dev = dev_set_flags(tmp_path)
    out = tmp_path / "run"
    assert train_main(["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(out), "--pooling", "mean", "--normalize",
                       "--max_steps", "2", "--save_strategy", "no", *dev, "--dev_metric", "R@100",
                       "--dev_eval_steps", "2", *COMMON]) == 0
    curve = json.loads((out / "dev_curve.json").read_text())
    # R@100 over a 6-passage dev corpus finds every judged passage: 1.0 at every check (MRR@10 would not be)
    assert curve["metric"] == "R@100" and [p["dev_R@100"] for p in curve["curve"]] == [1.0, 1.0]
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("dev_R@100" in h for h in history) and not any("dev_MRR@10" in h for h in history)
    # an unknown measure is refused in one line before any training
    assert train_main(["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(tmp_path / "bad"), *dev, "--dev_metric", "NotAMetric@3",
                       *COMMON]) == 2
    assert not (tmp_path / "bad" / "dev_curve.json").exists()
