"""Tests of multiview_plugin/progress.py: bars hidden on request, and tqdm's environment honoured otherwise."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from multiview_plugin.progress import progress_bar


def test_a_bar_is_shown_unless_the_caller_hides_it():
    out = io.StringIO()
    assert list(progress_bar(range(3), desc="search", file=out)) == [0, 1, 2]
    assert "search" in out.getvalue()
    assert progress_bar(range(3), enabled=False, file=io.StringIO()).disable is True


def test_tqdm_disable_in_the_environment_hides_an_enabled_bar():
    """tqdm reads TQDM_* when it is imported, so the check runs in a fresh process; a plain
    ``tqdm(..., disable=False)`` (what the search used to pass) shows its bar there anyway."""
    code = ("import sys; from tqdm import tqdm; from multiview_plugin.progress import progress_bar; "
            "list(progress_bar(range(3), desc='ours')); list(tqdm(range(3), desc='plain', disable=False))")
    env = {**os.environ, "TQDM_DISABLE": "1"}
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    assert "plain" in err and "ours" not in err
