"""Tests of multiview_plugin/driver/analyze.py: the view-usage analysis driver."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from multiview_plugin.modeling import load_encoder
from tests.conftest import TOPICS
from tests.search.test_explain import brute_force_views, encode_and_index, write_corpus


def test_analyze_counts_wins_and_normalised_local_variation(tiny_bert, tmp_path):
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.driver.analyze import main as analyze_main
    from multiview_plugin.registry import get_encoder_class
    from multiview_plugin.scoring import local_variation, view_perplexity

    torch.manual_seed(0)
    model_dir = tmp_path / "mvr"
    get_encoder_class("mvr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr",
                                                  mvr_num_views=4, temperature=0.5),
                                   DataArguments(pad_to_multiple_of=None, passage_max_len=32)).save(model_dir)
    corpus = write_corpus(tmp_path / "corpus.jsonl", {f"d{i}": t for i, (_, _, t) in enumerate(TOPICS)})
    shard, index = encode_and_index(model_dir, corpus, tmp_path)
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\twhat is {a}\nr{i}\twhere is {b}\n" for i, (a, b, _) in enumerate(TOPICS)))
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"{p}{i} 0 d{i} 1\n" for i in range(len(TOPICS)) for p in "qr") + "q0 0 d1 0\n")
    args = ["--index", str(index), "--topics", str(topics), "--qrels", str(qrels), "--encoder", str(model_dir),
            "--hits", "3"]
    assert analyze_main([*args, "--output_dir", str(tmp_path / "a")]) == 0
    result = json.loads((tmp_path / "a" / "analysis.json").read_text())
    png = (tmp_path / "a" / "view_usage.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # brute force over the shard: every relevant (query, doc) pair (the rel-0 judgment is not one)
    model = load_encoder(model_dir).eval()
    queries = [f"what is {a}" for a, _, _ in TOPICS] + [f"where is {b}" for _, b, _ in TOPICS]
    q = model.encode_queries(queries)
    docs = list(range(len(TOPICS))) * 2
    scores = torch.from_numpy(np.stack([brute_force_views(shard, f"d{d}", q[n]) for n, d in enumerate(docs)]))
    assert result["pairs"] == 2 * len(TOPICS) and result["queries"] == 2 * len(TOPICS)
    assert result["relevant_wins"] == np.bincount(scores.argmax(dim=1).numpy(), minlength=4).tolist()
    assert sum(result["top_hit_wins"]) == 3 * result["queries"] and sum(result["top1_wins"]) == result["queries"]
    assert result["local_variation"] == pytest.approx(local_variation(scores).item(), abs=1e-6)
    assert result["local_variation_model_temperature"] == pytest.approx(
        local_variation(scores, temperature=0.5).item(), abs=1e-6)
    assert result["local_variation_raw"] == pytest.approx(local_variation(scores, normalize=False).item(), abs=1e-6)
    assert result["view_perplexity"] == pytest.approx(view_perplexity(scores, torch.tensor(docs)).item(), abs=1e-6)
    assert result["views_per_document"] == {"4": len(TOPICS)}
    assert result["view_labels"] == ["[VIE1]", "[VIE2]", "[VIE3]", "[VIE4]"]
    assert sum(result["mean_sorted_probability"]) == pytest.approx(1.0)
    assert result["mean_uniform_probability"] == pytest.approx([0.25] * 4)
    # --lv_temperature is the softmax's τ
    assert analyze_main([*args, "--output_dir", str(tmp_path / "b"), "--lv_temperature", "0.01"]) == 0
    sharp = json.loads((tmp_path / "b" / "analysis.json").read_text())
    assert sharp["local_variation"] == pytest.approx(local_variation(scores, temperature=0.01).item(), abs=1e-6)
    assert sharp["local_variation"] != pytest.approx(result["local_variation"])
