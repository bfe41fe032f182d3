"""Issue 16: options for mean-pooled backbones (residual MVR, MLR layer pooling, DCSR poolings and passage
unit), warm-up and duplicate-positive masking, across methods."""

import json
import logging

import pytest
import torch
import torch.nn.functional as F

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.cli import parse_dataclasses
from multiview_plugin.data.dataset import TrainCollator, content_keys
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.modeling import load_encoder
from multiview_plugin.modeling.base import duplicate_positive_mask
from multiview_plugin.modeling.mvr import MvrEncoder
from multiview_plugin.registry import get_encoder_class

PASSAGES = ["paris is the capital of france. it was built on the river. the king lived there.",
            "the moon is small. the sun is a star and gives light.",
            "a cat is a small animal"]
QUERIES = ["what is the capital of france", "where is the moon", "which animal is small"]
COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--query_max_len", "16", "--passage_max_len", "48", "--seed", "7", "--dataloader_num_workers", "0"]


def build(name: str, backbone, *flags: str):
    margs, dargs = parse_dataclasses((ModelArguments, DataArguments), [
        "--model_name", name, "--model_name_or_path", str(backbone), "--passage_max_len", "48", *flags])
    return get_encoder_class(name).build(margs, dargs).eval()


def scores(model, queries=QUERIES, passages=PASSAGES):
    with torch.no_grad():
        q = model.encode_query(model.formatter.queries(queries))
        p, mask = model.encode_passage(model.formatter.passages(passages))
        return model.compute_similarity(q, p, mask)


# ------------------------------------------------------------------ warm-up


def test_learning_rate_warms_up(tiny_bert, train_file, tmp_path):
    out = tmp_path / "dpr"
    assert train_main(["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(out), "--max_steps", "10", "--learning_rate", "1e-3",
                       "--warmup_ratio", "0.5", "--logging_steps", "1", "--save_strategy", "no", *COMMON]) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    lrs = [h["learning_rate"] for h in history if "learning_rate" in h]
    assert lrs[0] < 0.5 * 1e-3 and max(lrs) == pytest.approx(1e-3, rel=0.05)
    assert lrs[:5] == sorted(lrs[:5])  # rising during the 5 warm-up steps


# --------------------------------------------------------------- MVR residual
def test_residual_mvr_starts_exactly_as_dpr_mean(tiny_bert, tmp_path):
    dpr = build("dpr", tiny_bert, "--pooling", "mean", "--normalize")
    mvr = build("mvr", tiny_bert, "--mvr_views", "residual", "--pooling", "mean", "--normalize",
                "--mvr_num_views", "4")
    torch.testing.assert_close(scores(mvr), scores(dpr), atol=1e-5, rtol=0)
    with torch.no_grad():
        reps, _ = mvr.encode_passage(mvr.formatter.passages(PASSAGES))
    assert reps.shape[:2] == (3, 4)
    mvr.save(tmp_path / "m")
    torch.testing.assert_close(scores(load_encoder(tmp_path / "m").eval()), scores(dpr), atol=1e-5, rtol=0)
    # once the gates move, the views differ from each other and from dpr's vector
    with torch.no_grad():
        mvr.view_gates.copy_(torch.tensor([0.0, 0.5, -0.5, 1.0]))
        reps, _ = mvr.encode_passage(mvr.formatter.passages(PASSAGES))
    assert (reps[:, 1] - reps[:, 2]).abs().max() > 1e-3
    assert not torch.allclose(scores(mvr), scores(dpr), atol=1e-4)


def test_residual_viewers_do_not_change_the_text_states(tiny_bert):
    mvr = build("mvr", tiny_bert, "--mvr_views", "residual", "--pooling", "mean", "--mvr_num_views", "3")
    batch = mvr.formatter.passages(PASSAGES)
    plain = mvr.tokenizer(PASSAGES, padding=True, truncation=True, max_length=48, return_tensors="pt")
    assert torch.equal(batch["input_ids"][:, :int(batch["num_text_tokens"])], plain["input_ids"])
    with torch.no_grad():
        reference = mvr.p_encoder(**plain).last_hidden_state
        ours = dict(batch)
        num_text = int(ours.pop("num_text_tokens"))
        from multiview_plugin.modeling.mvr import read_only_viewer_mask

        ours["attention_mask"] = read_only_viewer_mask(ours["attention_mask"], num_text, torch.float32)
        hidden = mvr.p_encoder(**ours).last_hidden_state
    real = plain["attention_mask"].bool()
    torch.testing.assert_close(hidden[:, :num_text][real], reference[real], atol=1e-5, rtol=0)


def test_residual_gates_train_at_their_own_learning_rate(tiny_bert, train_file, tmp_path):
    out = tmp_path / "mvr"
    assert train_main(["--model_name", "mvr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(out), "--mvr_views", "residual", "--pooling", "mean",
                       "--normalize", "--temperature", "0.05", "--temperature_schedule", "fixed",
                       "--mvr_num_views", "2", "--mvr_gate_learning_rate", "0.05", "--learning_rate", "1e-6",
                       "--warmup_ratio", "0", "--max_steps", "6", "--save_strategy", "no", *COMMON]) == 0
    gates = load_encoder(out).view_gates.detach()
    # AdamW moves each gate by about its learning rate per step: 0.05-scale moves, not 1e-6-scale ones
    assert gates.abs().max() > 0.02, gates


def test_residual_options_are_validated(tiny_bert, capsys):
    from multiview_plugin.errors import ConfigError
    from multiview_plugin.modeling.config import EncoderConfig

    with pytest.raises(SystemExit):  # the flag lists its choices; the parser refuses another value in one line
        build("mvr", tiny_bert, "--mvr_views", "nope")
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--mvr_views must be one of"):  # the same value in a saved config
        get_encoder_class("mvr").validate_config(EncoderConfig("mvr", "x", options={"mvr_views": "nope"}))
    with pytest.raises(ConfigError, match="no effect with --mvr_views residual"):
        build("mvr", tiny_bert, "--mvr_views", "residual", "--mvr_viewer_positions", "distinct")
    with pytest.raises(ConfigError, match="residual or region only"):
        build("mvr", tiny_bert, "--mvr_gate_learning_rate", "0.01")


def test_collapse_guard_measures_and_names_the_fix(tiny_bert, caplog, monkeypatch):
    model = build("mvr", tiny_bert, "--mvr_num_views", "4")
    assert model.viewer_similarity() < 0.99  # random viewer embeddings on a random backbone stay apart
    ids = model.formatter.viewer_ids
    with torch.no_grad():  # identical viewer tokens at one shared position: one state, k copies
        emb = model.p_encoder.get_input_embeddings().weight
        emb[ids] = emb[ids[0]].clone()
    assert model.viewer_similarity() == pytest.approx(1.0, abs=1e-5)
    monkeypatch.setattr(MvrEncoder, "viewer_similarity", lambda self, texts=None: 0.9991)
    with caplog.at_level(logging.WARNING, logger="multiview_plugin.modeling.mvr"):
        build("mvr", tiny_bert, "--mvr_num_views", "4")
    assert "0.9991" in caplog.text and "--mvr_views residual" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="multiview_plugin.modeling.mvr"):
        build("mvr", tiny_bert, "--mvr_views", "residual", "--pooling", "mean")
    assert caplog.text == ""  # residual views cannot collapse below dpr: no probe, no warning


# ------------------------------------------------------------------------ MLR
def test_mlr_mean_layer_pooling(tiny_bert):
    model = build("mlr", tiny_bert, "--mlr_pooling", "max", "--mlr_layers", "2,1", "--mlr_layer_pooling", "mean")
    batch = model.formatter.passages(PASSAGES)
    with torch.no_grad():
        reps, _ = model.encode_passage(batch)
        states = model.p_encoder(**batch, output_hidden_states=True).hidden_states
    mask = batch["attention_mask"].unsqueeze(-1).float()
    for view, layer in enumerate([2, 1]):
        torch.testing.assert_close(reps[:, view], (states[layer] * mask).sum(1) / mask.sum(1))
    cls = build("mlr", tiny_bert, "--mlr_pooling", "max", "--mlr_layers", "2,1")
    with torch.no_grad():
        torch.testing.assert_close(cls.encode_passage(batch)[0][:, 1], states[1][:, 0])


def test_t5_mlr_layers_share_the_final_layer_norm(tmp_path):
    from tools.testing import make_tiny_t5

    t5 = make_tiny_t5(tmp_path / "t5")
    model = build("mlr", t5, "--mlr_pooling", "max", "--mlr_layers", "3,1")
    batch = model.formatter.passages(PASSAGES)
    with torch.no_grad():
        reps, _ = model.encode_passage(batch)
        states = model.p_encoder(**batch, output_hidden_states=True).hidden_states
        normed = model.p_encoder.encoder.final_layer_norm(states[1])
    mask = batch["attention_mask"].unsqueeze(-1).float()
    torch.testing.assert_close(reps[:, 1], (normed * mask).sum(1) / mask.sum(1))


# ----------------------------------------------------------------------- DCSR
def test_dcsr_mean_sentence_vectors_are_span_means(tiny_bert):
    model = build("dcsr", tiny_bert, "--dcsr_sentence_pooling", "mean", "--pooling", "mean")
    assert "<sent>" not in model.tokenizer.get_vocab()  # no new token: the backbone is untouched
    fmt = model.formatter
    batch = fmt.passages(PASSAGES[:2])
    with torch.no_grad():
        reps, mask = model.encode_passage(dict(batch))
        hidden = model.p_encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 token_type_ids=batch["token_type_ids"]).last_hidden_state
    plans = fmt.plan([fmt.split(p) for p in PASSAGES[:2]])
    for row, plan in enumerate(plans):
        assert int(mask[row].sum()) == len(plan) and len(plan) >= 2
        start = 1  # after [CLS]
        for j, tokens in enumerate(plan):
            assert batch["input_ids"][row, start:start + len(tokens)].tolist() == tokens
            torch.testing.assert_close(reps[row, j], hidden[row, start:start + len(tokens)].mean(0))
            start += len(tokens)


def test_dcsr_independent_sentences_equal_dpr_mean_of_each_sentence(tiny_bert):
    model = build("dcsr", tiny_bert, "--dcsr_sentence_pooling", "independent", "--pooling", "mean", "--normalize")
    dpr = build("dpr", tiny_bert, "--pooling", "mean", "--normalize")
    with torch.no_grad():
        reps, mask = model.encode_passage(model.formatter.passages(PASSAGES[:2]))
        sentences = list(model.formatter.split(PASSAGES[0]))
        single, _ = dpr.encode_passage(dpr.formatter.passages(sentences))
    torch.testing.assert_close(reps[0, :len(sentences)], single[:, 0], atol=1e-5, rtol=0)
    assert mask.sum(1).tolist() == [len(sentences), len(model.formatter.split(PASSAGES[1]))]


def test_dcsr_poolings_keep_the_same_sentences(tiny_bert):
    kept = {}
    for pooling in ("marker", "mean", "independent"):
        model = build("dcsr", tiny_bert, "--dcsr_sentence_pooling", pooling, "--pooling", "mean")
        with torch.no_grad():
            _, mask = model.encode_passage(model.formatter.passages(PASSAGES))
        kept[pooling] = mask.sum(1).tolist()
    assert kept["mean"] == kept["independent"] and all(a >= b for a, b in zip(kept["mean"], kept["marker"]))


def test_dcsr_mean_trains(tiny_bert, train_file, tmp_path):
    out = tmp_path / "dcsr"
    assert train_main(["--model_name", "dcsr", "--model_name_or_path", str(tiny_bert), "--dataset_path",
                       str(train_file), "--output_dir", str(out), "--dcsr_sentence_pooling", "mean", "--pooling",
                       "mean", "--normalize", "--temperature", "0.05", "--max_steps", "3", "--logging_steps", "1",
                       "--save_strategy", "no", "--mask_duplicate_positives", *COMMON]) == 0
    model = load_encoder(out)
    assert model.config.options["dcsr_sentence_pooling"] == "mean" and model.config.mask_duplicate_positives


def test_dcsr_passage_training_unit_is_max_sim_over_sentences(bert_no_dropout, tmp_path):
    from multiview_plugin.data.dataset import TrainDataset, load_train_records
    from multiview_plugin.data.sentence_dataset import SentenceTrainDataset

    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({
        "query_id": str(i), "query": q, "positive_passages": [{"docid": f"p{i}", "text": p}],
        "negative_passages": [{"docid": f"n{i}", "text": PASSAGES[(i + 1) % 3]}]}) + "\n"
        for i, (q, p) in enumerate(zip(QUERIES, PASSAGES))))
    records = load_train_records(str(path), cache_dir=str(tmp_path / "cache"))
    sentence = build("dcsr", bert_no_dropout, "--dcsr_sentence_pooling", "mean", "--pooling", "mean")
    assert isinstance(sentence.train_data(records, 2)[0], SentenceTrainDataset)  # the paper's default
    model = build("dcsr", bert_no_dropout, "--dcsr_sentence_pooling", "mean", "--pooling", "mean", "--normalize",
                  "--temperature", "0.05", "--dcsr_train_unit", "passage")
    assert model.config.options["dcsr_train_unit"] == "passage"
    dataset, collator = model.train_data(records, 2, negative_no_shuffle=True)
    assert isinstance(dataset, TrainDataset)
    batch = collator([dataset[i] for i in range(3)])
    model.train()
    with torch.no_grad():
        loss = model(query=batch["query"], passage=batch["passage"]).loss
    # by hand: each passage scores its best sentence; query i's positive is candidate 2i among 6
    model.eval()
    with torch.no_grad():
        q = model.encode_query(batch["query"])
        p, mask = model.encode_passage(dict(batch["passage"]))
    sims = torch.einsum("qd,psd->qps", q, p).masked_fill(~mask.unsqueeze(0), float("-inf")).max(-1).values
    assert mask.sum(1).tolist() == [3, 2, 2, 1, 1, 3]  # several sentences per passage: max-sim is not trivial
    expected = F.cross_entropy(sims / 0.05, torch.tensor([0, 2, 4]))
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=0)


def test_dcsr_passage_view_follows_the_sentences_and_equals_dpr(tiny_bert):
    flags = ("--dcsr_sentence_pooling", "mean", "--pooling", "mean", "--normalize")
    plain = build("dcsr", tiny_bert, *flags)
    model = build("dcsr", tiny_bert, *flags, "--dcsr_passage_view")
    dpr = build("dpr", tiny_bert, "--pooling", "mean", "--normalize")
    assert model.describe_views()["passage_view"] and "passage_view" not in plain.describe_views()
    with torch.no_grad():
        sentences, kept = plain.encode_passage(plain.formatter.passages(PASSAGES))
        reps, mask = model.encode_passage(model.formatter.passages(PASSAGES))
        passage, _ = dpr.encode_passage(dpr.formatter.passages(PASSAGES))
    counts = kept.sum(1)
    assert mask.sum(1).tolist() == (counts + 1).tolist() and reps.shape[1] == sentences.shape[1] + 1
    for row, n in enumerate(counts.tolist()):
        torch.testing.assert_close(reps[row, :n], sentences[row, :n])  # sentence j is still view j
        torch.testing.assert_close(reps[row, n], passage[row, 0], atol=1e-5, rtol=0)  # then dpr's vector
    # the untrained model scores a passage by max(dpr, best sentence)
    expected = torch.maximum(scores(plain), scores(dpr))
    torch.testing.assert_close(scores(model), expected, atol=1e-5, rtol=0)
    rows = model.view_rows(model.formatter, PASSAGES, mask.numpy())
    assert len(rows) == int(mask.sum()) and rows[int(counts[0])].tolist() == [0, len(PASSAGES[0]), 0]
    with pytest.raises(ConfigError, match="--dcsr_passage_view needs a whole-passage encoding"):
        build("dcsr", tiny_bert, "--dcsr_sentence_pooling", "independent", "--dcsr_passage_view")


def test_dcsr_passage_unit_refuses_sentence_negative_options(tiny_bert, capsys):
    from multiview_plugin.modeling.config import EncoderConfig

    with pytest.raises(ConfigError, match="--dcsr_in_passage_negatives 0: sentence negatives do not apply"):
        build("dcsr", tiny_bert, "--dcsr_train_unit", "passage", "--dcsr_in_passage_negatives", "0")
    with pytest.raises(SystemExit):  # the flag lists its choices; the parser refuses another value in one line
        build("dcsr", tiny_bert, "--dcsr_train_unit", "document")
    assert "invalid choice: 'document'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--dcsr_train_unit must be one of sentence, passage"):  # a saved config
        get_encoder_class("dcsr").validate_config(EncoderConfig("dcsr", "x", options={"dcsr_train_unit": "document"}))


# -------------------------------------------------------- duplicate positives
def test_duplicate_positive_mask_on_a_hand_made_batch():
    # 3 queries x group 2: q0 (+A, -B), q1 (+A, -C), q2 (+C, -A): A is q0's and q1's positive, C is q1's negative
    keys = content_keys(["A", "B", "A", "C", "C", "A"])
    target = torch.tensor([0, 2, 4])
    mask = duplicate_positive_mask(keys, target)
    assert mask.tolist() == [[False, False, True, False, False, True],
                             [True, False, False, False, False, True],
                             [False, False, False, True, False, False]]
    # the loss drops exactly the masked candidates from each softmax
    scores = torch.randn(3, 6)
    from multiview_plugin.losses.contrastive import ContrastiveLoss

    got = ContrastiveLoss()(scores.masked_fill(mask, float("-inf")).unsqueeze(-1), target, 0.5).loss
    want = torch.stack([F.cross_entropy(scores[i][~mask[i]][None] / 0.5,
                                        torch.tensor([int((~mask[i])[:target[i]].sum())]))
                        for i in range(3)]).mean()
    torch.testing.assert_close(got, want)


def test_masking_changes_the_training_loss_only_when_duplicates_exist(tiny_bert):
    model = build("dpr", tiny_bert, "--pooling", "mean", "--normalize", "--mask_duplicate_positives").train()
    features = [{"query": "what is paris", "passages": [PASSAGES[0], PASSAGES[1]]},
                {"query": "capital of france", "passages": [PASSAGES[0], PASSAGES[2]]}]
    batch = TrainCollator(model.formatter, passage_keys=True)(features)
    torch.manual_seed(0)
    masked = model(**batch)
    torch.manual_seed(0)
    plain = model(batch["query"], batch["passage"])
    assert masked.parts["masked_duplicates"] == pytest.approx(1.0)  # each query: one copy of its positive
    assert masked.loss < plain.loss
    distinct = [features[0], dict(features[1], passages=[PASSAGES[2], PASSAGES[1]])]  # positives P0, P2: no copies
    batch = TrainCollator(model.formatter, passage_keys=True)(distinct)
    torch.manual_seed(0)
    masked = model(**batch)
    torch.manual_seed(0)
    torch.testing.assert_close(masked.loss, model(batch["query"], batch["passage"]).loss)
