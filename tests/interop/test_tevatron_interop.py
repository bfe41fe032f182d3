"""Interop with Tevatron v2's own code (run where Tevatron is installed: the Tevatron step of .ci/run).

Tevatron's drivers run as subprocesses on our files, exactly as a user would run them (on CPU with
``--attn_implementation sdpa``): its trainer on our converter's output, its encoder and ours on one DPR model,
its search on our DPR and MVR shards; and our plugin driver, which trains through Tevatron's own dataset and
trainer, against our own driver.
"""

import json
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tevatron.retriever.driver.train", reason="Tevatron v2 is not installed (see .ci/run)")

from multiview_plugin.data.squad import convert_squad, write_squad_split  # noqa: E402
from multiview_plugin.driver.encode import main as encode_main  # noqa: E402
from multiview_plugin.driver.search import main as search_main  # noqa: E402
from multiview_plugin.modeling import load_encoder  # noqa: E402
from tests.data.test_squad import SMALL  # noqa: E402

CPU = ["--attn_implementation", "sdpa", "--report_to", "none"]
STEPS = ["--per_device_train_batch_size", "2", "--train_group_size", "2", "--max_steps", "3", "--logging_steps", "1",
         "--learning_rate", "1e-3", "--seed", "1", "--save_strategy", "no"]


def run(*args):
    proc = subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def logged_losses(stdout: str) -> list[float]:
    """Per-step losses from a Trainer's printed logs (Tevatron's driver saves no trainer_state.json)."""
    out = []
    for line in stdout.splitlines():
        line = line[line.find("{"):]
        if line.startswith("{'loss'"):
            out.append(float(eval(line)["loss"]))  # the Trainer prints a dict literal
    return out


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    """Our SQuAD converter's output, legacy and new format (train.jsonl + corpus.jsonl)."""
    tmp = tmp_path_factory.mktemp("squad")
    (tmp / "small.json").write_text(json.dumps(SMALL))
    split = convert_squad(tmp / "small.json", train_articles=range(3), eval_articles=range(0))
    return {fmt: write_squad_split(split, tmp / fmt, train_format=fmt) for fmt in ("legacy", "new")}


@pytest.mark.parametrize("fmt", ["legacy", "new"])
def test_tevatron_trains_on_our_converter_output_like_our_driver(squad, tiny_bert, tmp_path, fmt):
    files = squad[fmt]
    data = ["--dataset_path", files["train"]]
    if fmt == "new":
        data += ["--corpus_name", "json", "--corpus_path", files["corpus"]]
    tevatron = run("tevatron.retriever.driver.train", "--model_name_or_path", tiny_bert, "--output_dir",
                   tmp_path / "tev", *data, *CPU, *STEPS)
    theirs = logged_losses(tevatron.stdout + tevatron.stderr)
    ours_run = run("multiview_plugin.driver.train", "--model_name", "dpr", "--model_name_or_path", tiny_bert,
                   "--output_dir", tmp_path / "ours", "--dataset_path", files["train"], "--pad_to_multiple_of", "16",
                   *(["--corpus_path", files["corpus"]] if fmt == "new" else []), *CPU, *STEPS)
    ours = logged_losses(ours_run.stdout + ours_run.stderr)
    assert len(theirs) == len(ours) == 3 and all(np.isfinite(theirs))
    assert (tmp_path / "tev" / "model.safetensors").is_file()
    if fmt == "legacy":
        assert ours == pytest.approx(theirs, abs=1e-3)
    else:  # Tevatron's new-format loader reads a document's text without its title; ours joins both
        assert ours != pytest.approx(theirs, abs=1e-3)


@pytest.fixture(scope="module")
def corpus(squad):
    return squad["legacy"]["corpus"]


@pytest.fixture(scope="module")
def queries(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "queries.jsonl"
    texts = ["where do penguins breed", "what river flows through paris", "what do zoos keep", "tallest penguin"]
    path.write_text("".join(json.dumps({"query_id": f"q{i}", "query": t}) + "\n" for i, t in enumerate(texts)))
    return path


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def test_both_encoders_give_identical_arrays_for_one_dpr_model(tiny_bert, corpus, queries, tmp_path):
    for is_query, data in ((False, corpus), (True, queries)):
        flag = ["--encode_is_query"] if is_query else []
        tev_path = tmp_path / ("tev_q.pkl" if is_query else "tev_c.pkl")
        run("tevatron.retriever.driver.encode", "--output_dir", "temp", "--model_name_or_path", tiny_bert,
            "--dataset_name", "json", "--dataset_path", data, "--encode_output_path", tev_path,
            "--per_device_eval_batch_size", "3", "--pooling", "mean", "--normalize", *flag, *CPU)
        assert encode_main(["--output_dir", "temp", "--model_name_or_path", str(tiny_bert), "--dataset_name", "json",
                            "--dataset_path", str(data), "--encode_output_path", str(tmp_path / "ours.pkl"),
                            "--per_device_eval_batch_size", "3", "--pooling", "mean", "--normalize", "--overwrite",
                            "--pad_to_multiple_of", "16", *flag, *CPU]) == 0
        (theirs, their_ids), (ours, our_ids) = load(tev_path), load(tmp_path / "ours.pkl")
        assert our_ids == their_ids and len(our_ids) == (4 if is_query else 5)
        np.testing.assert_array_equal(ours, theirs)
    # the other way round: our search reads Tevatron's shards and ranks as its search
    reps = ["--query_reps", tmp_path / "tev_q.pkl", "--passage_reps", tmp_path / "tev_c.pkl", "--depth", "5"]
    run("tevatron.retriever.driver.search", *reps, "--save_ranking_to", tmp_path / "tev.txt", "--save_text")
    assert search_main([*map(str, reps), "--save_ranking_to", str(tmp_path / "ours.txt"), "--save_text"]) == 0
    theirs, ours = read_run(tmp_path / "tev.txt"), read_run(tmp_path / "ours.txt")
    assert sorted(ours) == [f"q{i}" for i in range(4)]
    for qid in ours:
        assert [d for d, _ in ours[qid]] == [d for d, _ in theirs[qid]]
        np.testing.assert_allclose([s for _, s in ours[qid]], [s for _, s in theirs[qid]], rtol=1e-5)


def collapse_by_max(lines: list[str]) -> dict[str, list[tuple[str, float]]]:
    """Tevatron's text ranking of ``docid#j`` rows → documents by their best view, best first."""
    best: dict[str, dict[str, float]] = defaultdict(dict)
    for line in lines:
        qid, row, score = line.split("\t")
        doc = row.rsplit("#", 1)[0]
        best[qid][doc] = max(best[qid].get(doc, -np.inf), float(score))
    return {q: sorted(d.items(), key=lambda x: -x[1]) for q, d in best.items()}


def read_run(path) -> dict[str, list[tuple[str, float]]]:
    run_ = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        qid, doc, score = line.split("\t")
        run_[qid].append((doc, float(score)))
    return run_


@pytest.mark.parametrize("name", ["dpr", "mvr"])
def test_tevatron_search_on_our_shards_equals_ours(name, tiny_bert, corpus, queries, tmp_path):
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.registry import get_encoder_class

    model = get_encoder_class(name).build(ModelArguments(model_name_or_path=str(tiny_bert), model_name=name,
                                                         mvr_num_views=3), DataArguments())
    model.save(tmp_path / "model")
    emb = tmp_path / "emb"
    for shard in range(2):
        assert encode_main(["--model_name_or_path", str(tmp_path / "model"), "--dataset_path", str(corpus),
                            "--encode_output_path", str(emb / f"corpus.{shard}.pkl"), "--dataset_number_of_shards",
                            "2", "--dataset_shard_index", str(shard)]) == 0
    assert encode_main(["--model_name_or_path", str(tmp_path / "model"), "--dataset_path", str(queries),
                        "--encode_is_query", "--encode_output_path", str(emb / "q.pkl")]) == 0
    rows = sum(len(load(emb / f"corpus.{s}.pkl")[1]) for s in range(2))
    run("tevatron.retriever.driver.search", "--query_reps", emb / "q.pkl", "--passage_reps", emb / "corpus.*.pkl",
        "--depth", rows, "--batch_size", "-1", "--save_ranking_to", tmp_path / "tev.txt", "--save_text")
    assert search_main(["--query_reps", str(emb / "q.pkl"), "--passage_reps", str(emb / "corpus.*.pkl"),
                        "--depth", "5", "--batch_size", "-1", "--save_ranking_to", str(tmp_path / "ours.txt"),
                        "--save_text"]) == 0
    theirs = collapse_by_max((tmp_path / "tev.txt").read_text().splitlines())
    ours = read_run(tmp_path / "ours.txt")
    assert sorted(ours) == sorted(theirs) == [f"q{i}" for i in range(4)]
    for qid in ours:
        assert [d for d, _ in ours[qid]] == [d for d, _ in theirs[qid]]
        np.testing.assert_allclose([s for _, s in ours[qid]], [s for _, s in theirs[qid]], rtol=1e-5, atol=1e-5)
    if name == "mvr":
        assert rows == 5 * 3


def plugin_and_our_losses(tmp_path, flags):
    """Per-step losses of the same training through the Tevatron plugin driver and through ours."""
    run("multiview_plugin.tevatron.train", *flags, "--output_dir", tmp_path / "plugin")
    run("multiview_plugin.driver.train", *flags, "--output_dir", tmp_path / "ours", "--pad_to_multiple_of", "16")
    losses = {}
    for run_dir in ("plugin", "ours"):
        state = json.loads((tmp_path / run_dir / "trainer_state.json").read_text())
        losses[run_dir] = [h["loss"] for h in state["log_history"] if "loss" in h]
    return losses


@pytest.mark.parametrize("name", ["dpr", "mvr"])
def test_plugin_driver_losses_equal_our_driver(name, squad, tiny_bert, tmp_path):
    # another method's flag is refused (issue 21), so --mvr_num_views goes with mvr only
    flags = ["--model_name", name, *(["--mvr_num_views", "2"] if name == "mvr" else []),
             "--model_name_or_path", tiny_bert, "--dataset_path", squad["legacy"]["train"], *CPU, *STEPS]
    losses = plugin_and_our_losses(tmp_path, flags)
    assert len(losses["ours"]) == 3 and losses["plugin"] == losses["ours"]
    # the plugin's output is our model format, encodable by our driver
    assert load_encoder(tmp_path / "plugin").config.model_name == name


def test_tevatron_lora_adapter_encodes_identically(squad, tiny_bert, corpus, tmp_path):
    """A DPR adapter from Tevatron's --lora training, merged by its encoder and by ours (--lora_name_or_path)."""
    run("tevatron.retriever.driver.train", "--model_name_or_path", tiny_bert, "--output_dir", tmp_path / "lora",
        "--dataset_path", squad["legacy"]["train"], "--lora", "--lora_target_modules", "query,value", "--lora_r", "4",
        *CPU, *STEPS)
    assert (tmp_path / "lora" / "adapter_config.json").is_file()
    common = ["--output_dir", "temp", "--model_name_or_path", str(tiny_bert), "--lora_name_or_path",
              str(tmp_path / "lora"), "--dataset_name", "json", "--dataset_path", str(corpus), "--pooling", "cls"]
    run("tevatron.retriever.driver.encode", *common, "--encode_output_path", tmp_path / "tev.pkl", *CPU)
    assert encode_main([*common, "--encode_output_path", str(tmp_path / "ours.pkl"), "--pad_to_multiple_of", "16",
                        *CPU]) == 0
    assert encode_main([*common[:4], *common[6:], "--encode_output_path", str(tmp_path / "base.pkl")]) == 0
    (theirs, their_ids), (ours, our_ids) = load(tmp_path / "tev.pkl"), load(tmp_path / "ours.pkl")
    assert our_ids == their_ids
    np.testing.assert_allclose(ours, theirs, atol=1e-6)
    assert not np.allclose(ours, load(tmp_path / "base.pkl")[0], atol=1e-4)  # the adapter changed the vectors


LORA = ["--lora", "--lora_target_modules", "query,key,value,dense", "--lora_r", "4"]


def test_plugin_driver_trains_lora_like_our_driver(squad, tiny_bert, tmp_path):
    """--lora through Tevatron's dataset and trainer: our driver's first-step loss (the same model, adapter and
    batch; test_plugin_driver_losses_equal_our_driver compares whole runs) and our LoRA folder layout."""
    flags = ["--model_name", "mvr", "--mvr_num_views", "2", "--model_name_or_path", tiny_bert,
             "--dataset_path", squad["legacy"]["train"], *LORA, *CPU, *STEPS]
    losses = plugin_and_our_losses(tmp_path, flags)
    assert len(losses["plugin"]) == len(losses["ours"]) == 3 and losses["plugin"][0] == losses["ours"][0]
    assert (tmp_path / "plugin" / "lora_adapter" / "adapter_model.safetensors").is_file()
    assert load_encoder(tmp_path / "plugin").config.options["lora"]["r"] == 4


def test_tevatron_encode_merges_our_dpr_adapter(squad, tiny_bert, corpus, tmp_path):
    """Our driver's DPR adapter (lora_adapter/) merged by Tevatron's encoder gives our folder's vectors."""
    run("multiview_plugin.driver.train", "--model_name", "dpr", "--model_name_or_path", tiny_bert, "--output_dir",
        tmp_path / "dpr", "--dataset_path", squad["legacy"]["train"], *LORA, *CPU, *STEPS)
    run("tevatron.retriever.driver.encode", "--output_dir", "temp", "--model_name_or_path", tiny_bert,
        "--lora_name_or_path", tmp_path / "dpr" / "lora_adapter", "--dataset_name", "json", "--dataset_path", corpus,
        "--pooling", "cls", "--encode_output_path", tmp_path / "tev.pkl", *CPU)
    assert encode_main(["--model_name_or_path", str(tmp_path / "dpr"), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "ours.pkl"), "--pad_to_multiple_of", "16"]) == 0
    (theirs, their_ids), (ours, our_ids) = load(tmp_path / "tev.pkl"), load(tmp_path / "ours.pkl")
    assert our_ids == their_ids
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
