"""multiview_plugin.driver.train with a saved multiview model: a shared option given with a value other than the
saved one is refused, even when that value is the flag's default (``--normalize False`` on a model saved with
``normalize``), instead of training on with the saved setting while the user believes otherwise."""

from __future__ import annotations

import pytest

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.train import main
from multiview_plugin.registry import get_encoder_class

COMMON = ["--train_group_size", "2", "--per_device_train_batch_size", "4", "--report_to", "none",
          "--dataloader_num_workers", "0", "--max_steps", "1"]


@pytest.fixture
def saved(tiny_bert, tmp_path):
    model = get_encoder_class("dpr").build(ModelArguments(model_name_or_path=str(tiny_bert), normalize=True),
                                           DataArguments(add_special_tokens=False))
    model.save(tmp_path / "saved")
    return tmp_path / "saved"


@pytest.mark.parametrize("flags, refused", [(["--normalize", "False"], "--normalize False (the model's: True)"),
                                            (["--no_add_special_tokens"], None),
                                            (["--add_special_tokens", "True"],
                                             "--add_special_tokens True (the model's: False)")])
def test_a_given_default_that_differs_from_the_saved_model_is_refused(saved, train_file, tmp_path, capsys, flags,
                                                                      refused):
    rc = main(["--model_name_or_path", str(saved), "--dataset_path", str(train_file), "--output_dir",
               str(tmp_path / "out"), *COMMON, *flags])
    err = capsys.readouterr().err
    if refused is None:  # the saved model's own value: accepted
        assert rc == 0, err
    else:
        assert rc == 2 and "Traceback" not in err
        assert refused in err and "keeps training with its own config" in err
