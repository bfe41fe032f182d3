"""--grad_cache: chunked encoding gives the loss and gradients of one big batch, for single- and multi-vector
methods, and the train driver's per-step losses do not change with it."""

import json

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.data.dataset import load_train_records
from multiview_plugin.driver.train import main as train_main
from multiview_plugin.errors import ConfigError
from multiview_plugin.registry import get_encoder_class
from multiview_plugin.training.grad_cache import grad_cache_step, split_batch

OPTIONS = {"dpr": {}, "mvr": {"mvr_num_views": 3}, "dcsr": {}}


def model_and_batch(name, backbone, train_file, batch=8, **options):
    model = get_encoder_class(name).build(
        ModelArguments(model_name_or_path=str(backbone), model_name=name, temperature=0.5,
                       **{**OPTIONS[name], **options}),
        DataArguments(pad_to_multiple_of=None, passage_max_len=48))
    dataset, collator = model.train_data(load_train_records(str(train_file)), group_size=2)
    return model.train(), collator([dataset[i] for i in range(batch)])


def loss_and_grads(model, step):
    model.zero_grad()
    torch.manual_seed(123)
    loss = step()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def plain_step(model, batch):
    out = model(**batch)
    out.loss.backward()
    return out.loss


def assert_same(a, b, atol=1e-5):
    assert a[0] == pytest.approx(b[0], abs=atol)
    assert a[1].keys() == b[1].keys() and a[1]
    worst = max(float((a[1][k] - b[1][k]).abs().max()) for k in a[1])
    assert worst <= atol, worst


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_chunked_loss_and_gradients_equal_one_batch(name, bert_no_dropout, train_file):
    model, batch = model_and_batch(name, bert_no_dropout, train_file)
    full = loss_and_grads(model, lambda: plain_step(model, batch))
    for q_chunk, p_chunk in ((3, 5), (1, 1)):
        cached = loss_and_grads(model, lambda q=q_chunk, p=p_chunk: grad_cache_step(model, batch, q, p).loss)
        assert_same(cached, full)


def test_residual_mvr_batches_split_with_their_text_length(bert_no_dropout, train_file):
    """Residual MVR's passage batch carries a 0-d ``num_text_tokens`` (where the viewers start): every chunk
    gets it (it used to fail: a 0-d tensor has no rows to split)."""
    model, batch = model_and_batch("mvr", bert_no_dropout, train_file, mvr_num_views=2, mvr_views="residual",
                                   pooling="mean")
    assert batch["passage"]["num_text_tokens"].dim() == 0
    full = loss_and_grads(model, lambda: plain_step(model, batch))
    assert "view_gates" in full[1]
    assert_same(loss_and_grads(model, lambda: grad_cache_step(model, batch, 3, 5).loss), full, atol=5e-5)


@pytest.mark.parametrize("name", ["dpr", "mvr"])
def test_dropout_is_replayed_in_the_gradient_pass(name, tiny_bert, train_file):
    """With dropout on, one chunk per side draws the same masks as the plain step only if the re-encoding
    replays the random state of the no-grad pass."""
    model, batch = model_and_batch(name, tiny_bert, train_file)
    full = loss_and_grads(model, lambda: plain_step(model, batch))
    cached = loss_and_grads(model, lambda: grad_cache_step(model, batch, 100, 100).loss)
    assert_same(cached, full)


def test_unsplittable_batch_and_bad_chunk_size():
    with pytest.raises(ConfigError, match="must be >= 1"):
        split_batch({"input_ids": torch.zeros(4, 3)}, 0)
    with pytest.raises(ConfigError, match="different numbers of rows"):
        split_batch({"input_ids": torch.zeros(4, 3), "view_counts": torch.ones(2)}, 2)


def test_train_driver_grad_cache_keeps_per_step_losses(bert_no_dropout, train_file, tmp_path):
    def losses(*flags):
        out = tmp_path / f"run{len(flags)}"
        assert train_main(["--model_name", "mvr", "--mvr_num_views", "2", "--model_name_or_path", str(bert_no_dropout),
                           "--dataset_path", str(train_file), "--output_dir", str(out), "--train_group_size", "2",
                           "--per_device_train_batch_size", "8", "--max_steps", "3", "--logging_steps", "1",
                           "--report_to", "none", "--seed", "1", "--learning_rate", "1e-3", *flags]) == 0
        state = json.loads((out / "trainer_state.json").read_text())
        return [h["loss"] for h in state["log_history"] if "loss" in h]

    plain = losses()
    cached = losses("--grad_cache", "--gc_q_chunk_size", "3", "--gc_p_chunk_size", "5")
    assert len(plain) == 3 and len(set(plain)) == 3
    assert cached == pytest.approx(plain, abs=1e-4)
