"""Tevatron v2 flag parity: every flag of Tevatron's train/encode/search drivers (snapshot in
tests/fixtures/tevatron_flags.json, written by tools/tevatron_flags.py from the vendored source) is accepted with
Tevatron's default, or refused with what to use instead; and the flags users rely on do what they say."""

import importlib.util
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.modeling import load_encoder
from multiview_plugin.tevatron_parity import DIFFERENCES, REFUSED
from tests.conftest import TOPICS, write_topics_corpus

ROOT = Path(__file__).resolve().parents[1]
# the parity table writer is a tool of the checkout, not part of the package
_spec = importlib.util.spec_from_file_location("tevatron_flags_tool", ROOT / "tools" / "tevatron_flags.py")
_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tool)
TABLE_START, TABLE_END, flag_status, our_flags, parity_table = (
    _tool.TABLE_START, _tool.TABLE_END, _tool.flag_status, _tool.our_flags, _tool.parity_table)
SNAPSHOT = json.loads((ROOT / "tests" / "fixtures" / "tevatron_flags.json").read_text())
OWN_GROUPS = ("ModelArguments", "DataArguments", "TevatronTrainingArguments")


def tevatron_flags(driver):
    if driver == "search":
        return SNAPSHOT["search"]
    return {f: v for group in SNAPSHOT["train_encode"].values() for f, v in group.items()}


@pytest.mark.parametrize("driver", ["train", "encode", "search"])
def test_every_tevatron_flag_is_accepted_or_refused(driver):
    ours = our_flags()
    missing = [f for f, v in tevatron_flags(driver).items() if flag_status(driver, f, v, ours) == "MISSING"]
    assert not missing, f"{driver}: Tevatron flags neither accepted nor refused: {missing}"


@pytest.mark.parametrize("driver", ["train", "encode", "search"])
def test_accepted_flags_keep_tevatron_defaults(driver):
    ours = our_flags()
    if driver == "search":
        flags = SNAPSHOT["search"]
    else:  # inherited TrainingArguments defaults belong to the installed transformers, not to Tevatron
        flags = {f: v for g in OWN_GROUPS for f, v in SNAPSHOT["train_encode"][g].items()}
    wrong = {}
    for flag, default in flags.items():
        if flag not in ours[driver] or flag in DIFFERENCES or default == "<required>":
            continue
        mine = ours[driver][flag]
        if driver == "encode" and (mine is None or mine == "<required>"):  # None: the saved model's setting
            continue
        if mine != default:
            wrong[flag] = (default, mine)
    assert not wrong, f"{driver}: defaults differ from Tevatron's (tevatron, ours): {wrong}"


def test_refusals_name_real_tevatron_flags_that_we_do_not_parse():
    ours = our_flags()
    for driver, refused in REFUSED.items():
        for flag in refused:
            assert flag in tevatron_flags(driver), f"{driver}: stale refusal of --{flag}"
            assert flag not in ours[driver], f"{driver}: --{flag} is both refused and parsed"


def test_readme_table_is_generated_and_current():
    text = (ROOT / "docs" / "tevatron.md").read_text(encoding="utf-8")
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    assert text[start:end].strip() == parity_table(SNAPSHOT), \
        "docs/tevatron.md's Tevatron flag table is stale: run python tools/tevatron_flags.py readme"


@pytest.mark.parametrize("main,flag", [(train_main, "--is_bidirectional"), (train_main, "--train_yaml=x.yaml"),
                                       (encode_main, "--lora_r=8"), (encode_main, "--no_encode_image")])
def test_refused_flag_is_one_line_with_what_to_use(main, flag, tmp_path, capsys):
    assert main(["--model_name_or_path", "m", "--dataset_path", "d", "--encode_output_path", "o",
                 "--output_dir", str(tmp_path), flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {flag.split('=')[0].replace('no_', '')} (Tevatron)")


# ----------------------------------------------------------------------------- flags that do something
@pytest.fixture
def corpus(tmp_path):
    return write_topics_corpus(tmp_path / "corpus.jsonl")


def encode(tmp_path, model, corpus, *flags, name="c.pkl"):
    out = tmp_path / name
    assert encode_main(["--model_name_or_path", str(model), "--dataset_path", str(corpus),
                        "--encode_output_path", str(out), "--overwrite", *flags]) == 0
    with open(out, "rb") as f:
        return pickle.load(f)


def bert_states(model_dir, texts, **tok_kwargs):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    batch = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt", **tok_kwargs)
    with torch.no_grad():
        return AutoModel.from_pretrained(model_dir)(**batch).last_hidden_state, batch["attention_mask"]


def test_plain_checkpoint_encodes_as_dpr_with_pooling_and_normalize(tiny_bert, corpus, tmp_path):
    """A Tevatron/HF checkpoint (no multiview_config.json) encodes as dpr, pooled as the flags say."""
    texts = [f"{a} {t}" for a, _, t in TOPICS]
    hidden, mask = bert_states(tiny_bert, texts)
    reps, lookup = encode(tmp_path, tiny_bert, corpus, "--output_dir", "temp")
    assert lookup == [f"d{i}" for i in range(len(TOPICS))]
    np.testing.assert_allclose(reps, hidden[:, 0].numpy(), atol=1e-5)  # Tevatron's default: cls, no normalize
    reps, _ = encode(tmp_path, tiny_bert, corpus, "--pooling", "avg", "--normalize")
    mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    np.testing.assert_allclose(reps, torch.nn.functional.normalize(mean, dim=-1).numpy(), atol=1e-5)
    reps, _ = encode(tmp_path, tiny_bert, corpus, "--pooling", "eos")
    last = hidden[torch.arange(len(texts)), mask.sum(1) - 1]
    np.testing.assert_allclose(reps, last.numpy(), atol=1e-5)
    # left padding (BERT's positions then shift, so the states differ): pooled from the last column
    left, _ = encode(tmp_path, tiny_bert, corpus, "--pooling", "last", "--padding_side", "left")
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path / "left")
    cfg = json.loads((tmp_path / "left" / "tokenizer_config.json").read_text())
    (tmp_path / "left" / "tokenizer_config.json").write_text(json.dumps({**cfg, "padding_side": "left"}))
    from transformers import AutoModel

    tok = AutoTokenizer.from_pretrained(tmp_path / "left")
    assert tok.padding_side == "left"
    batch = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        want = AutoModel.from_pretrained(tiny_bert)(**batch).last_hidden_state[:, -1]
    np.testing.assert_allclose(left, want.numpy(), atol=1e-5)
    assert not np.allclose(left, last.numpy(), atol=1e-3)


def test_prefix_eos_and_special_tokens_change_the_inputs(tiny_bert, corpus, tmp_path):
    base, _ = encode(tmp_path, tiny_bert, corpus)
    texts = [f"passage: {a} {t}" for a, _, t in TOPICS]
    hidden, _ = bert_states(tiny_bert, texts)
    prefixed, _ = encode(tmp_path, tiny_bert, corpus, "--passage_prefix", "passage: ")
    np.testing.assert_allclose(prefixed, hidden[:, 0].numpy(), atol=1e-5)
    assert not np.allclose(prefixed, base)
    model = load_encoder(tiny_bert, checkpoint_options={"append_eos_token": True})
    model.tokenizer.eos_token = "[SEP]"  # BERT has no eos: stand one in
    ids = model.formatter.passages(["paris is large", "the moon"])["input_ids"]
    assert ids[0, 5].item() == model.tokenizer.sep_token_id and ids[0].tolist().count(model.tokenizer.sep_token_id) == 2
    plain = load_encoder(tiny_bert, checkpoint_options={"add_special_tokens": False}).formatter.passages(["paris"])
    assert plain["input_ids"][0].tolist() == [model.tokenizer.convert_tokens_to_ids("paris")]


def test_multi_vector_models_refuse_tevatron_tokenisation(tiny_bert, tmp_path, train_file):
    assert train_main(["--model_name", "mvr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(tmp_path / "o"), "--padding_side", "left"]) == 2


def test_bf16_attn_implementation_and_dtype(tiny_bert, corpus, tmp_path):
    base, _ = encode(tmp_path, tiny_bert, corpus)
    eager, _ = encode(tmp_path, tiny_bert, corpus, "--attn_implementation", "eager")
    np.testing.assert_allclose(eager, base, atol=1e-5)
    bf16, _ = encode(tmp_path, tiny_bert, corpus, "--bf16")
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, base)
    np.testing.assert_allclose(bf16, base, atol=0.1)
    model = load_encoder(tiny_bert, checkpoint_options={}, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(Exception, match="bogus"):
        load_encoder(tiny_bert, checkpoint_options={}, attn_implementation="bogus")


def test_encode_logs_ignored_training_flags(tiny_bert, corpus, tmp_path, caplog):
    encode(tmp_path, tiny_bert, corpus, "--learning_rate", "1e-5", "--train_group_size", "4", "--fp16")
    assert "ignored here (training flags; Tevatron's encode ignores them too): --learning_rate " \
           "--train_group_size" in caplog.text


def test_saved_model_flags_override_its_config(tiny_bert, corpus, tmp_path):
    reps, _ = encode(tmp_path, tiny_bert, corpus)
    dpr = load_encoder(tiny_bert, checkpoint_options={"pooling": "mean"})
    dpr.save(tmp_path / "saved")
    saved, _ = encode(tmp_path, tmp_path / "saved", corpus)
    assert not np.allclose(saved, reps)  # the saved model's mean pooling
    overridden, _ = encode(tmp_path, tmp_path / "saved", corpus, "--pooling", "cls")
    np.testing.assert_allclose(overridden, reps, atol=1e-6)


def test_train_driver_takes_tevatron_model_flags(tiny_bert, train_file, tmp_path):
    out = tmp_path / "run"
    os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
    assert train_main(["--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file), "--output_dir",
                       str(out), "--train_group_size", "2", "--per_device_train_batch_size", "4", "--max_steps", "1",
                       "--report_to", "none", "--pooling", "eos", "--attn_implementation", "eager",
                       "--logging_dir", str(tmp_path / "tb")]) == 0
    assert os.environ.pop("TENSORBOARD_LOGGING_DIR") == str(tmp_path / "tb")
    assert load_encoder(out).config.pooling == "eos"
    from multiview_plugin.arguments import DataArguments, ModelArguments
    from multiview_plugin.driver.train import build_model

    for attn, dtype in (("eager", "bfloat16"), ("sdpa", "float32")):
        model = build_model(ModelArguments(model_name_or_path=str(tiny_bert), attn_implementation=attn, dtype=dtype),
                            DataArguments())
        assert model.query_encoder.config._attn_implementation == attn
        assert next(model.parameters()).dtype == getattr(torch, dtype)


def test_encode_reads_a_load_dataset_builder_and_split(tiny_bert, corpus, tmp_path):
    """--dataset_name other than json goes through datasets.load_dataset (hub or builder), with its split."""
    import datasets

    want, want_ids = encode(tmp_path, tiny_bert, corpus)
    rows = datasets.load_dataset("json", data_files=str(corpus), split="train")
    rows.to_parquet(str(tmp_path / "corpus.parquet"))
    got, ids = encode(tmp_path, tiny_bert, tmp_path / "corpus.parquet", "--dataset_name", "parquet",
                      "--dataset_split", "train[2:]", name="p.pkl")
    assert ids == want_ids[2:]
    np.testing.assert_allclose(got, want[2:], atol=1e-6)
    assert (tmp_path / "p.pkl.input.jsonl").is_file()
    assert encode_main(["--model_name_or_path", str(tiny_bert), "--dataset_path", str(corpus), "--dataset_split",
                        "test", "--encode_output_path", str(tmp_path / "x.pkl")]) == 2
