"""Tests of multiview_plugin/tevatron/train.py: the Tevatron-trainer driver (with Tevatron installed:
tests/interop/test_tevatron_interop.py, the interop step of .ci/run)."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.mark.skipif(importlib.util.find_spec("tevatron") is not None, reason="Tevatron is installed here")
def test_tevatron_train_without_tevatron(capsys):
    from multiview_plugin.tevatron.train import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    assert "needs Tevatron v2" in err and "--mvr_num_views" in out
    assert main(["--model_name", "mvr"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: multiview_plugin.tevatron needs Tevatron v2") and err.count("\n") == 1
