"""Flags and configs (issue #21): no custom model code is run or prompted for, every size read from a saved config
or given as a flag is bounded before anything is allocated, and no train flag is accepted only to be ignored.

Each test fails on the code before these checks (a prompt and a traceback, a MemoryError, exit 0 with the flag
ignored, or no word about it)."""

from __future__ import annotations

import ast
import json
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.train import build_model, load_training_data, refuse_encode_only_flags
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling.config import EncoderConfig
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.tevatron_parity import ENCODE_ONLY
from tests.conftest import write_topics_corpus

PACKAGE = Path(__file__).resolve().parents[2] / "multiview_plugin"
COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "32", "--dataloader_num_workers", "0"]


def _one_line(err: str, *needles: str) -> str:
    assert "Traceback" not in err, err
    lines = [line[line.index("error: "):] for line in err.splitlines() if "error: " in line]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _one_line_error(capsys, *needles: str) -> str:
    return _one_line(capsys.readouterr().err, *needles)


def _train_args(tiny_bert: Path, train_file: Path, out: Path, *flags: str) -> list[str]:
    return ["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir", str(out),
            *COMMON, *flags]


def _saved_mvr(tiny_bert: Path, folder: Path) -> Path:
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=2),
        DataArguments(passage_max_len=32, query_max_len=16))
    model.save(folder)
    return folder


# ----------------------------------------------------------------------------- trust_remote_code=False
MARKER_CODE = "from pathlib import Path\nPath(__file__).with_name('CODE_RAN').write_text('ran')\n"


def _custom_code_folder(tiny_bert: Path, folder: Path, variant: str) -> Path:
    """A copy of the tiny BERT whose config (or tokenizer config) maps Auto classes to the folder's own code,
    which would leave a CODE_RAN file if it ever ran."""
    shutil.copytree(tiny_bert, folder)
    for name in ("configuration_custom.py", "modeling_custom.py", "tokenization_custom.py"):
        (folder / name).write_text(MARKER_CODE)
    file = folder / ("tokenizer_config.json" if variant == "tokenizer" else "config.json")
    data = json.loads(file.read_text())
    if variant == "tokenizer":
        data["auto_map"] = {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]}
    else:
        data["auto_map"] = {"AutoConfig": "configuration_custom.CustomConfig",
                            "AutoModel": "modeling_custom.CustomModel"}
        if variant == "unknown_type":
            data["model_type"] = "custom_bert"  # transformers has no class of its own: it would prompt
    file.write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("variant", ["unknown_type", "known_type", "tokenizer"])
@pytest.mark.parametrize("driver", ["train", "encode"])
def test_model_folder_with_custom_code_is_refused_not_prompted(tiny_bert, train_file, tmp_path, capsys, variant,
                                                              driver):
    """main: an unknown model_type printed transformers' 'Do you wish to run the custom code? [y/N]' prompt and
    ended in a ValueError traceback; a known one (or a custom tokenizer) loaded the built-in class in place of the
    folder's code, exit 0: silently another model."""
    folder = _custom_code_folder(tiny_bert, tmp_path / "custom", variant)
    if driver == "train":
        rc = train_main(_train_args(folder, train_file, tmp_path / "out", "--max_steps", "1"))
    else:
        rc = encode_main(["--model_name_or_path", str(folder), "--dataset_path",
                          str(write_topics_corpus(tmp_path / "corpus.jsonl")),
                          "--encode_output_path", str(tmp_path / "c.pkl")])
    captured = capsys.readouterr()
    assert "Do you wish to run the custom code" not in captured.out + captured.err
    assert rc == 2
    _one_line(captured.err, "auto_map", "trust_remote_code=False")
    assert not (folder / "CODE_RAN").exists()


def test_every_from_pretrained_call_passes_trust_remote_code_false():
    """Every ``from_pretrained(...)`` call in the package says ``trust_remote_code=False`` (peft's adapters carry no
    code: their calls are exempt)."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained"):
                continue
            if "PeftModel" in ast.unparse(node.func.value):
                continue
            if not any(k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                       for k in node.keywords):
                missing.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not missing, missing


# ----------------------------------------------------------------------------- bounded sizes
@pytest.fixture(scope="module")
def saved_mvr(tiny_bert, tmp_path_factory) -> Path:
    return _saved_mvr(tiny_bert, tmp_path_factory.mktemp("saved") / "mvr")


def _edited_copy(saved: Path, folder: Path, **edits) -> Path:
    shutil.copytree(saved, folder)
    path = folder / "multiview_config.json"
    data = json.loads(path.read_text())
    for key, value in edits.items():
        if key.startswith("options."):
            data["options"][key.split(".", 1)[1]] = value
        else:
            data[key] = value
    path.write_text(json.dumps(data))
    return folder


def test_saved_config_asking_for_a_billion_views_is_one_line_before_allocating(saved_mvr, tmp_path, capsys,
                                                                                monkeypatch):
    """main: the encoder built 10**9 viewer-token strings (a MemoryError traceback after minutes)."""
    import multiview_plugin.modeling.mvr as mvr

    real = mvr.viewer_tokens

    def guarded(num_views: int) -> list[str]:
        assert num_views <= 1024, f"{num_views} viewer tokens were about to be allocated"
        return real(num_views)

    monkeypatch.setattr(mvr, "viewer_tokens", guarded)
    folder = _edited_copy(saved_mvr, tmp_path / "huge", **{"options.mvr_num_views": 10 ** 9})
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    tracemalloc.start()
    start = time.perf_counter()
    try:
        rc = encode_main(["--model_name_or_path", str(folder), "--dataset_path", str(corpus),
                          "--encode_output_path", str(tmp_path / "c.pkl")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 2
    assert time.perf_counter() - start < 30 and peak < 64 * 2 ** 20
    _one_line_error(capsys, str(folder / "multiview_config.json"), "field 'options.mvr_num_views'",
                    ">= 1 and <= 1024", "got 1000000000")
    assert not (tmp_path / "c.pkl").exists()


@pytest.mark.parametrize("field,value,needle", [
    ("options.mvr_num_views", 0, ">= 1 and <= 1024, got 0"),
    ("options.mvr_num_views", "8", "must be an integer >= 1 and <= 1024, got '8'"),
    ("options.mvr_num_views", True, "must be an integer"),
    ("options.mvr_num_views", 8.0, "must be an integer"),
    ("options.mvr_lambda", float("nan"), "must be a finite number >= 0.0"),
    ("options.mvr_lambda", -1.0, "must be >= 0.0, got -1.0"),
    ("passage_max_len", 10 ** 9, "field 'passage_max_len' must be >= 1 and <= 1048576"),
    ("query_max_len", 0, "field 'query_max_len' must be >= 1"),
    ("pad_to_multiple_of", 10 ** 9, "field 'pad_to_multiple_of' must be >= 0 and <= 1024"),
    ("options", [1, 2], "field 'options' must be an object"),
])
def test_every_size_in_a_saved_config_is_bounded(saved_mvr, tmp_path, field, value, needle):
    folder = _edited_copy(saved_mvr, tmp_path / "edited", **{field: value})
    with pytest.raises(ConfigError) as err:
        EncoderConfig.load(folder)
    message = str(err.value)
    assert message.startswith(str(folder / "multiview_config.json")) and needle in message, message
    assert "\n" not in message


@pytest.mark.parametrize("name,options,needle", [
    ("mebert", {"mebert_num_vectors": 10 ** 6}, "field 'options.mebert_num_vectors' must be >= 1 and <= 1024"),
    ("dcsr", {"dcsr_bm25_negatives": 10 ** 6}, "field 'options.dcsr_bm25_negatives' must be >= 0 and <= 1024"),
    ("dcsr", {"dcsr_in_passage_negatives": -1}, "field 'options.dcsr_in_passage_negatives' must be >= 0"),
])
def test_other_methods_sizes_are_bounded(tmp_path, name, options, needle):
    EncoderConfig(model_name=name, backbone="b").save(tmp_path)
    path = tmp_path / "multiview_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "options": options}))
    with pytest.raises(ConfigError, match="^" + str(path)) as err:
        EncoderConfig.load(tmp_path)
    assert needle in str(err.value)


@pytest.mark.parametrize("flags,needle", [
    (["--model_name", "mvr", "--mvr_num_views", "1000000000"],
     "--mvr_num_views must be >= 1 and <= 1024, got 1000000000"),
    (["--passage_max_len", "1000000000"], "--passage_max_len must be >= 1 and <= 1048576, got 1000000000"),
    (["--pad_to_multiple_of", "100000"], "--pad_to_multiple_of must be >= 0 and <= 1024"),
    (["--lora_r", "1000000000"], "--lora_r must be >= 1 and <= 8192"),
    (["--num_proc", "0"], "--num_proc must be >= 1, got 0"),
])
def test_the_same_sizes_as_flags_are_refused(tiny_bert, train_file, tmp_path, capsys, flags, needle):
    """The flags share the saved config's bounds and are refused at parse time, before any loading."""
    start = time.perf_counter()
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out", *flags)) == 2
    assert time.perf_counter() - start < 30
    _one_line_error(capsys, needle)
    assert not (tmp_path / "out").exists()


def test_encode_override_out_of_bounds_is_refused(saved_mvr, tmp_path, capsys):
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(saved_mvr), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl"), "--passage_max_len", "1000000000"]) == 2
    _one_line_error(capsys, "--passage_max_len must be >= 1 and <= 1048576, got 1000000000")


def test_adapter_config_with_a_huge_rank_is_refused_before_peft_allocates(saved_mvr, tiny_bert, tmp_path, capsys):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 10 ** 9}))
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(tiny_bert), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl"), "--lora_name_or_path", str(adapter)]) == 2
    _one_line_error(capsys, str(adapter / "adapter_config.json"), "field 'r' must be >= 1 and <= 8192")


# ----------------------------------------------------------------------------- flags train used to ignore
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
    _one_line_error(capsys, f"--config_name {tmp_path / 'missing'}: no model config there")


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
    _one_line_error(capsys, flag, "saved multiview model")


def test_model_flags_a_saved_model_would_ignore_are_refused(saved_mvr, train_file, tmp_path, capsys):
    """main: training went on with the saved model's 2 views and temperature, the flags ignored, exit 0."""
    assert train_main(_train_args(saved_mvr, train_file, tmp_path / "out", "--model_name", "mvr",
                                  "--mvr_num_views", "4", "--temperature", "0.5", "--max_steps", "1")) == 2
    _one_line_error(capsys, "--mvr_num_views 4 (the model's: 2)", "--temperature 0.5 (the model's: 1.0)",
                    "keeps training with its own config")


@pytest.mark.parametrize("flag,value", [("--dataset_number_of_shards", "4"), ("--dataset_shard_index", "1"),
                                        ("--encode_is_query", None), ("--encode_output_path", "emb/q.pkl")])
def test_encode_only_flags_with_a_value_are_refused_by_train(tiny_bert, train_file, tmp_path, capsys, flag, value):
    """main: each was parsed and ignored, exit 0."""
    assert train_main(_train_args(tiny_bert, train_file, tmp_path / "out", flag,
                                  *([value] if value else []), "--max_steps", "1")) == 2
    _one_line_error(capsys, flag, "python -m multiview_plugin.driver.encode", "drop it")
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


def test_num_proc_loads_and_validates_hub_datasets_in_processes(train_file, tmp_path, monkeypatch):
    """--num_proc reaches datasets (load_dataset and the validating map, as Tevatron's load_dataset), and a bad
    record found in a worker process still gives its file, line and field (the error pickles whole)."""
    import datasets

    from multiview_plugin.data.dataset import load_hub_train_records
    from multiview_plugin.data.readers import InputFormatError

    seen = []
    real_load, real_map = datasets.load_dataset, datasets.Dataset.map
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: seen.append(("load", k.get("num_proc")))
                        or real_load(*a, **k))
    monkeypatch.setattr(datasets.Dataset, "map", lambda self, *a, **k: seen.append(("map", k.get("num_proc")))
                        or real_map(self, *a, **k))
    records = load_hub_train_records(DataArguments(dataset_path=str(train_file), num_proc=2,
                                                   dataset_cache_dir=str(tmp_path / "c1")))
    assert len(records) == 16 and ("load", 2) in seen and ("map", 2) in seen
    lines = train_file.read_text().splitlines()
    bad = json.loads(lines[12])
    bad["query"] = None
    lines[12] = json.dumps(bad)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFormatError, match="line 13: field 'query'"):
        load_hub_train_records(DataArguments(dataset_path=str(tmp_path / "bad.jsonl"), num_proc=2,
                                             dataset_cache_dir=str(tmp_path / "c2")))


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


@pytest.mark.parametrize("content,needle", [
    ("[1, 2]", "not a JSON object"),
    ('{"format_version": "2"}', "field 'format_version': expected an integer, got '2'"),
    ('{"format_version": true}', "field 'format_version': expected an integer, got True"),
])
def test_a_malformed_config_is_one_line_not_a_traceback(tmp_path, content, needle):
    """The object check comes before any field is read (a JSON list once raised AttributeError)."""
    (tmp_path / "multiview_config.json").write_text(content)
    with pytest.raises(ConfigError) as err:
        EncoderConfig.load(tmp_path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_adapter_rank_pattern_is_bounded_too(tmp_path):
    """peft gives the modules of ``rank_pattern`` their own rank: each is bounded like ``r``."""
    from multiview_plugin.modeling.lora import check_adapter_config

    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8,
                                                              "rank_pattern": {"query": 10 ** 9}}))
    with pytest.raises(ConfigError, match="field 'rank_pattern.query' must be >= 1 and <= 8192"):
        check_adapter_config(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8,
                                                              "rank_pattern": {"query": 16}}))
    check_adapter_config(tmp_path)
