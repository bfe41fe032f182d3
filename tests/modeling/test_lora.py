"""LoRA training through peft (Tevatron v2's --lora flags): what each flag does, what trains, the saved folder
(merged weights + lora_adapter/), resume, starting from an adapter, and the interplay with --grad_cache,
residual MVR, untied encoders and gradient checkpointing. Tiny random BERT throughout."""

import json
import logging
import pickle
import shutil

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("peft")

from peft import PeftModel  # noqa: E402
from transformers import AutoModel  # noqa: E402

from multiview_plugin.arguments import DataArguments, ModelArguments  # noqa: E402
from multiview_plugin.data.dataset import load_train_records  # noqa: E402
from multiview_plugin.driver.encode import main as encode_main  # noqa: E402
from multiview_plugin.driver.train import build_model  # noqa: E402
from multiview_plugin.driver.train import main as train_main  # noqa: E402
from multiview_plugin.errors import ConfigError  # noqa: E402
from multiview_plugin.modeling import load_encoder  # noqa: E402
from multiview_plugin.modeling.lora import (  # noqa: E402
    ADAPTER_WEIGHTS,
    LORA_ADAPTER_DIR,
    is_lora,
    merged_state_dict,
)
from multiview_plugin.modeling.persistence import load_adapter_model  # noqa: E402
from multiview_plugin.training.checkpoints import checkpoint_problems  # noqa: E402
from multiview_plugin.training.grad_cache import grad_cache_step  # noqa: E402
from tests.conftest import TOPICS, make_tiny_bert, one_line_error, write_topics_corpus, write_train_file  # noqa: E402

BERT_TARGETS = "query,key,value,dense"
COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "32", "--seed", "7", "--dataloader_num_workers", "0",
          "--learning_rate", "1e-2", "--warmup_ratio", "0", "--logging_steps", "1"]
RESIDUAL = ["--model_name", "mvr", "--mvr_views", "residual", "--mvr_num_views", "2", "--pooling", "mean",
            "--temperature", "0.1", "--temperature_schedule", "fixed", "--mvr_gate_learning_rate", "0.05"]
QUERIES = ["what is paris", "where is the moon", "who built rome"]
PASSAGES = ["paris is the capital of france. it was built on the river.", "the moon is small. the sun is a star.",
            "rome is in italy. rome was founded by a king."]


def build(backbone, name="dpr", data=None, **options):
    torch.manual_seed(0)
    options.setdefault("lora_target_modules", BERT_TARGETS)
    return build_model(ModelArguments(model_name_or_path=str(backbone), model_name=name, lora=True, **options),
                       DataArguments(pad_to_multiple_of=None, passage_max_len=48, query_max_len=16, **(data or {})))


def perturb(model, scale=0.05, seed=1):
    """Move every trainable parameter as training would (LoRA B starts at 0: the adapter would do nothing)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=generator) * scale)
    return model


@torch.no_grad()
def scores(model):
    model.eval()
    formatter = model.formatter
    q = model.encode_query(formatter.queries(QUERIES))
    p, mask = model.encode_passage(formatter.passages(PASSAGES))
    return model.compute_similarity(q, p, mask)


def trainable_names(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


def is_adapter_param(name):
    return ".lora_A." in name or ".lora_B." in name or "trainable_tokens_delta" in name


# ----------------------------------------------------------------------------------- the flags
def test_each_flag_shapes_the_adapter(tiny_bert):
    model = build(tiny_bert, lora_r=4, lora_alpha=8, lora_dropout=0.25, lora_target_modules="query,value")
    assert is_lora(model.query_encoder) and model.is_lora
    layer = model.query_encoder.base_model.model.encoder.layer[0].attention.self
    assert tuple(layer.query.lora_A["default"].weight.shape) == (4, 32)  # r x hidden
    assert tuple(layer.value.lora_B["default"].weight.shape) == (32, 4)
    assert layer.query.scaling["default"] == 8 / 4  # alpha / r
    assert layer.query.lora_dropout["default"].p == 0.25
    assert not hasattr(layer.key, "lora_A")  # not a target
    wrapped = {n.split(".lora_A.")[0] for n in trainable_names(model) if ".lora_A." in n}
    assert {w.rsplit(".", 1)[-1] for w in wrapped} == {"query", "value"}
    config = model.query_encoder.peft_config["default"]
    assert (config.r, config.lora_alpha, config.lora_dropout, config.task_type) == (4, 8, 0.25, "FEATURE_EXTRACTION")
    assert config.base_model_name_or_path == str(tiny_bert) and not config.inference_mode
    assert model.config.options["lora"] == {"r": 4, "alpha": 8, "dropout": 0.25, "target_modules": ["query", "value"],
                                            "trainable_token_ids": [], "adapter": "lora_adapter",
                                            "started_from": None}
    wider = build(tiny_bert, lora_r=8, lora_alpha=64)
    wide_layer = wider.query_encoder.base_model.model.encoder.layer[0]
    assert tuple(wide_layer.attention.self.key.lora_A["default"].weight.shape) == (8, 32)
    assert wide_layer.intermediate.dense.scaling["default"] == 64 / 8
    assert wide_layer.attention.self.query.lora_dropout["default"].p == 0.1  # Tevatron's default dropout


def test_unknown_target_modules_are_one_line_errors(tiny_bert, train_file, tmp_path, capsys):
    with pytest.raises(ConfigError, match="its Linear modules are named dense, key, query, value"):
        build(tiny_bert, lora_target_modules="qkv")
    # Tevatron's default names LLaMA-style modules: on BERT the driver says what to pass instead
    rc = train_main(["--lora", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(train_file),
                     "--output_dir", str(tmp_path / "x"), *COMMON])
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the loading progress bars
    assert rc == 2 and "Traceback" not in capsys.readouterr().err
    assert err.startswith("error: --lora_target_modules q_proj,k_proj,v_proj,o_proj,down_proj,up_proj,gate_proj: ")
    assert err.endswith("(e.g. --lora_target_modules dense,key,query,value)")


# ------------------------------------------------------------------------------ what trains
def test_only_adapters_added_tokens_and_extra_parameters_get_gradients(tiny_bert, train_file):
    model = build(tiny_bert, "mvr", mvr_views="residual", mvr_num_views=2, pooling="mean")
    new_ids = model.config.options["lora"]["trainable_token_ids"]
    assert new_ids == model.tokenizer.convert_tokens_to_ids(["[VIE]", "[VIE1]", "[VIE2]"])
    names = trainable_names(model)
    assert "view_gates" in names and all(is_adapter_param(n) for n in names - {"view_gates"})
    assert sum("trainable_tokens_delta" in n for n in names) == 1
    dataset, collator = model.train_data(load_train_records(str(train_file)), group_size=2)
    model.train()
    with torch.no_grad():
        model.view_gates.fill_(0.5)  # at 0 (their start) the gates pass no gradient to the viewers
    model(**collator([dataset[i] for i in range(4)])).loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    # BERT's pooler.dense is a "dense" too, so it has an adapter, but no method reads the pooler output
    assert with_grad == {n for n in names if ".pooler." not in n}
    delta = dict(model.named_parameters())[next(n for n in names if "trainable_tokens_delta" in n)]
    # the document viewers' rows learn; [VIE], the query viewer, is not read by the residual form
    assert delta.shape == (3, 32) and delta.grad.abs().sum(1).gt(0).tolist() == [False, True, True]


# ------------------------------------------------------------------ a LoRA run of the train driver
@pytest.fixture(scope="module")
def residual_run(tmp_path_factory):
    """MVR (residual views: learned gates outside the backbone, added viewer tokens) trained with LoRA for 4
    steps, checkpoints at 2 and 4; the final folder is copied to ``straight`` before anything else runs."""
    tmp = tmp_path_factory.mktemp("lora_run")
    backbone, train = make_tiny_bert(tmp / "bert"), write_train_file(tmp / "train.jsonl")
    out = tmp / "run"
    argv = [*RESIDUAL, "--lora", "--lora_r", "4", "--lora_target_modules", BERT_TARGETS, "--model_name_or_path",
            str(backbone), "--dataset_path", str(train), "--output_dir", str(out), "--max_steps", "4",
            "--save_strategy", "steps", "--save_steps", "2", *COMMON]
    assert train_main(argv) == 0
    shutil.copytree(out, tmp / "straight", ignore=shutil.ignore_patterns("checkpoint-*"))
    return {"backbone": backbone, "train": train, "out": out, "straight": tmp / "straight", "argv": argv}


def test_the_saved_folder_is_a_complete_model_plus_its_adapter(residual_run):
    out, backbone = residual_run["straight"], residual_run["backbone"]
    assert (out / "model.safetensors").is_file() and (out / "multiview_extra.safetensors").is_file()
    assert (out / LORA_ADAPTER_DIR / "adapter_config.json").is_file()
    options = json.loads((out / "multiview_config.json").read_text())["options"]
    assert options["lora"]["r"] == 4 and options["lora"]["target_modules"] == ["dense", "key", "query", "value"]
    merged = load_file(str(out / "model.safetensors"))
    original = AutoModel.from_pretrained(backbone).state_dict()
    assert set(merged) == set(original)  # an ordinary BERT folder: no lora_* or .base_layer names
    # the frozen weights did not move: the LayerNorms and position embeddings are the backbone's, bit for bit,
    # and so are the word embeddings except the added viewer rows
    for key in ("embeddings.LayerNorm.weight", "embeddings.position_embeddings.weight",
                "encoder.layer.1.output.LayerNorm.bias"):
        assert torch.equal(merged[key], original[key])
    words, added = original["embeddings.word_embeddings.weight"], options["lora"]["trainable_token_ids"]
    kept = [i for i in range(len(words)) if i not in added]  # (the tiny vocabulary has duplicates: ids are reused)
    assert len(added) == 3 and torch.equal(merged["embeddings.word_embeddings.weight"][kept], words[kept])
    # ... and the adapted ones are exactly the backbone's plus the saved adapter's update
    rebuilt = load_adapter_model(out)
    assert is_lora(rebuilt.query_encoder)
    again = merged_state_dict(rebuilt.query_encoder)
    assert all(torch.equal(again[k], merged[k]) for k in merged)
    assert not torch.equal(merged["encoder.layer.0.attention.self.query.weight"],
                           original["encoder.layer.0.attention.self.query.weight"])
    gates = load_file(str(out / "multiview_extra.safetensors"))["view_gates"]
    assert bool(gates.ne(0).all())  # the parameters outside the backbone trained too
    model = load_encoder(out)
    assert not is_lora(model.query_encoder)  # load_encoder gives the merged model
    torch.testing.assert_close(scores(model), scores(rebuilt), atol=1e-5, rtol=0)


def test_resume_loads_the_adapter_and_ends_like_the_straight_run(residual_run, caplog):
    out, argv = residual_run["out"], residual_run["argv"]
    assert checkpoint_problems(out / "checkpoint-2") == []
    shutil.rmtree(out / "checkpoint-4")  # interrupted after step 2
    caplog.set_level(logging.INFO, logger="multiview_plugin")
    assert train_main(argv) == 0
    assert f"resuming from {out / 'checkpoint-2'}" in caplog.text
    straight = residual_run["straight"]
    for name in (f"{LORA_ADAPTER_DIR}/{ADAPTER_WEIGHTS}", "model.safetensors", "multiview_extra.safetensors"):
        want, got = load_file(str(straight / name)), load_file(str(out / name))
        assert want.keys() == got.keys()
        for key in want:
            torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0)
    # a LoRA checkpoint without its adapter cannot resume
    (out / "checkpoint-2" / LORA_ADAPTER_DIR / ADAPTER_WEIGHTS).unlink()
    assert checkpoint_problems(out / "checkpoint-2") == [f"{LORA_ADAPTER_DIR}/{ADAPTER_WEIGHTS} missing"]


def test_train_from_an_adapter(residual_run, tmp_path, capsys):
    straight, backbone = residual_run["straight"], residual_run["backbone"]
    model = build(backbone, "mvr", mvr_views="residual", mvr_num_views=2, pooling="mean", lora_r=16,
                  lora_name_or_path=str(straight))
    assert model.config.options["lora"]["r"] == 4 and model.config.options["lora"]["started_from"] == str(straight)
    saved = load_file(str(straight / LORA_ADAPTER_DIR / ADAPTER_WEIGHTS))
    params = dict(model.named_parameters())
    assert all(params[n].requires_grad for n in params if is_adapter_param(n))  # trainable, as Tevatron's
    for key, value in saved.items():  # peft's saved names drop the adapter name ("default")
        name = "query_encoder." + key.replace(".weight", ".default.weight").replace("delta", "delta.default")
        assert torch.equal(params[name], value), name
    # one of our folders: its parameters outside the backbone come along (a plain peft adapter has none)
    assert torch.equal(model.view_gates, load_file(str(straight / "multiview_extra.safetensors"))["view_gates"])
    out = tmp_path / "more"
    rc = train_main([*RESIDUAL, "--lora_name_or_path", str(straight), "--model_name_or_path", str(backbone),
                     "--dataset_path", str(residual_run["train"]), "--output_dir", str(out), "--max_steps", "1",
                     "--save_strategy", "no", *COMMON])
    assert rc == 0
    key = "base_model.model.encoder.layer.0.attention.self.query.lora_B.weight"
    assert not torch.equal(load_file(str(out / LORA_ADAPTER_DIR / ADAPTER_WEIGHTS))[key], saved[key])  # it trained
    # the adapter of a LoRA-trained folder is already merged into it: stacking it twice is refused
    rc = train_main([*RESIDUAL, "--lora_name_or_path", str(straight), "--model_name_or_path", str(straight),
                     "--dataset_path", str(residual_run["train"]), "--output_dir", str(tmp_path / "twice"), *COMMON])
    err = capsys.readouterr().err
    assert rc == 2 and "is already merged into" in err
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(straight), "--lora_name_or_path", str(straight),
                        "--dataset_path", str(corpus), "--encode_output_path", str(tmp_path / "e.pkl")]) == 2
    assert "already holds the merged weights" in capsys.readouterr().err


# ------------------------------------------------------------------ merged == unmerged, peft == ours
@pytest.mark.parametrize("name,options", [("dpr", {}), ("dcsr", {}), ("mvr", {"mvr_num_views": 3})])
def test_saved_folder_scores_like_the_training_model(tiny_bert, tmp_path, name, options):
    model = perturb(build(tiny_bert, name, **options))
    added = model.config.options["lora"]["trainable_token_ids"]
    assert len(added) == {"dpr": 0, "dcsr": 1, "mvr": 4}[name]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    want = scores(model)
    model.save(tmp_path / name)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # saving merged nothing in place
    torch.testing.assert_close(scores(load_encoder(tmp_path / name)), want, atol=1e-5, rtol=0)
    # the adapter in lora_adapter/ loads with plain peft onto the backbone (its vocabulary resized as the method's)
    base = AutoModel.from_pretrained(tiny_bert)
    base.resize_token_embeddings(len(model.tokenizer), mean_resizing=False)
    peft_model = PeftModel.from_pretrained(base, str(tmp_path / name / LORA_ADAPTER_DIR))
    plain = load_encoder(tmp_path / name)
    plain.query_encoder = peft_model
    torch.testing.assert_close(scores(plain), want, atol=1e-5, rtol=0)


def test_a_dpr_adapter_merges_like_tevatrons_encode(tiny_bert, tmp_path):
    """Our DPR adapter is a Tevatron adapter: --lora_name_or_path over the plain backbone (Tevatron's encode,
    and ours) gives the vectors of our saved folder."""
    perturb(build(tiny_bert)).save(tmp_path / "dpr")
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")

    def encode(*flags):
        out = tmp_path / "e.pkl"
        assert encode_main(["--dataset_path", str(corpus), "--encode_output_path", str(out), "--overwrite",
                            *flags]) == 0
        with open(out, "rb") as f:
            return pickle.load(f)[0]

    ours = encode("--model_name_or_path", str(tmp_path / "dpr"))
    for adapter in (tmp_path / "dpr", tmp_path / "dpr" / LORA_ADAPTER_DIR):
        merged = encode("--model_name_or_path", str(tiny_bert), "--lora_name_or_path", str(adapter), "--pooling", "cls")
        torch.testing.assert_close(torch.from_numpy(merged), torch.from_numpy(ours), atol=1e-5, rtol=0)
    assert len(ours) == len(TOPICS)


# ------------------------------------------------------------------------------------- interplay
def grads_of(model, step):
    model.zero_grad()
    torch.manual_seed(123)
    loss = step()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(a, b, atol=1e-5):
    assert a[0] == pytest.approx(b[0], abs=atol) and a[1].keys() == b[1].keys() and a[1]
    assert max(float((a[1][k] - b[1][k]).abs().max()) for k in a[1]) <= atol


@pytest.mark.parametrize("backbone,dropout,chunks", [("bert_no_dropout", 0.0, (3, 5)),
                                                      ("tiny_bert", 0.1, (100, 100))])
def test_grad_cache_and_residual_views_through_peft(request, train_file, backbone, dropout, chunks):
    """Residual MVR's 4-D attention masks go through PeftModel's forward; --grad_cache gives the gradients of one
    batch (in chunks without dropout; in one chunk per side with LoRA and backbone dropout replayed)."""
    model = perturb(build(request.getfixturevalue(backbone), "mvr", mvr_views="residual", mvr_num_views=2,
                          pooling="mean", lora_dropout=dropout))
    dataset, collator = model.train_data(load_train_records(str(train_file)), group_size=2)
    batch = collator([dataset[i] for i in range(8)])
    model.train()

    def plain():
        out = model(**batch)
        out.loss.backward()
        return out.loss

    full = grads_of(model, plain)
    assert "view_gates" in full[1]
    assert_same_grads(grads_of(model, lambda: grad_cache_step(model, batch, *chunks).loss), full)
    # the text part of a residual view is exactly dpr's passage vector, as without LoRA
    with torch.no_grad():
        model.eval()
        model.view_gates.zero_()
        reps, _ = model.encode_passage(model.formatter.passages(PASSAGES))
        torch.testing.assert_close(reps[:, 0], reps[:, 1])


def test_gradient_checkpointing_keeps_the_gradients(bert_no_dropout, train_file):
    model = perturb(build(bert_no_dropout, lora_dropout=0.0))
    dataset, collator = model.train_data(load_train_records(str(train_file)), group_size=2)
    batch = collator([dataset[i] for i in range(4)])
    model.train()

    def step():
        out = model(**batch)
        out.loss.backward()
        return out.loss

    plain = grads_of(model, step)
    model.activation_checkpointing_enable()
    assert model.query_encoder.get_base_model().is_activation_checkpointing
    assert_same_grads(grads_of(model, step), plain)


def test_untied_encoders_get_an_adapter_each(tiny_bert, tmp_path):
    model = perturb(build(tiny_bert, "dcsr", untie_encoder=True))
    assert is_lora(model.query_encoder) and is_lora(model.passage_encoder)
    want = scores(model)
    model.save(tmp_path / "untied")
    for side in ("query_model", "passage_model"):
        assert (tmp_path / "untied" / LORA_ADAPTER_DIR / side / ADAPTER_WEIGHTS).is_file()
    torch.testing.assert_close(scores(load_encoder(tmp_path / "untied")), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(scores(load_adapter_model(tmp_path / "untied")), want, atol=1e-5, rtol=0)
    fresh = build(tiny_bert, "dcsr", untie_encoder=True)
    fresh.load_weights(tmp_path / "untied")  # what a resumed run does
    torch.testing.assert_close(scores(fresh), want, atol=1e-6, rtol=0)


def test_continue_a_saved_model_with_or_without_lora(tiny_bert, residual_run, tmp_path):
    """A saved full fine-tuned model gets a new adapter on top (its method's tokens found in the tokenizer); a
    saved LoRA model loads merged, and without --lora trains in full (its config no longer claims LoRA)."""
    from multiview_plugin.registry import get_encoder_class

    # the lengths build() passes: a saved model refuses flags that differ from its own config
    plain = get_encoder_class("mvr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr",
                                                          mvr_num_views=3),
                                           DataArguments(pad_to_multiple_of=None, passage_max_len=48, query_max_len=16))
    plain.save(tmp_path / "plain")
    model = build(tmp_path / "plain", "mvr")
    viewers = model.tokenizer.convert_tokens_to_ids(["[VIE]", "[VIE1]", "[VIE2]", "[VIE3]"])
    assert is_lora(model.query_encoder) and model.config.options["lora"]["trainable_token_ids"] == viewers
    full = build_model(ModelArguments(model_name_or_path=str(residual_run["straight"]), model_name="mvr"),
                       DataArguments())
    assert not is_lora(full.query_encoder) and "lora" not in full.config.options
    assert all(p.requires_grad for p in full.parameters())


def test_adapter_config_with_a_huge_rank_is_refused_before_peft_allocates(saved_mvr, tiny_bert, tmp_path, capsys):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 10 ** 9}))
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(tiny_bert), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl"), "--lora_name_or_path", str(adapter)]) == 2
    one_line_error(capsys, str(adapter / "adapter_config.json"), "field 'r' must be >= 1 and <= 8192")


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
