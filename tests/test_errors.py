"""Tests of multiview_plugin/errors.py: the user-facing errors, one line each."""

from __future__ import annotations

import torch

from multiview_plugin.driver.encode import main as encode_main
from tests.conftest import one_line_error, write_topics_corpus


def test_a_weights_pickle_naming_a_forbidden_global_is_one_line(tiny_bert, tmp_path, capsys):
    """main: a model folder whose pytorch_model.bin pickle names os.system was refused by torch, but as a 40-line
    traceback; now one line naming the folder and the global (and nothing runs)."""
    import os
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_bert, folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    torch.save({"x": Evil()}, folder / "pytorch_model.bin")
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    assert encode_main(["--model_name_or_path", str(folder), "--dataset_path", str(corpus),
                        "--encode_output_path", str(tmp_path / "c.pkl")]) == 2
    one_line_error(capsys, str(folder), "system", "could run code")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "c.pkl").exists()
