"""Tests of tools/reporting/plots.py: the training curves of the dev-selected runs."""

from __future__ import annotations

import pytest

from tools.reporting import plots
from tools.reporting import records as rec

ROWS = [{"system": "dpr", "curves": {"loss": [[0, 2.0], [10, 1.0]], "dev": [[0, 0.5], [10, 0.6]],
                                     "dev_metric": "MRR@10"}},
        {"system": "dpr (max)", "curves": {"loss": [[0, 9.0]]}},  # a max row: no curve of its own
        {"system": "mvr", "curves": {"loss": [[0, 2.5], [10, 1.2]]}}]


def test_curves_are_written_where_the_records_go_and_reproducibly(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(rec, "RESULTS", tmp_path)
    assert plots.plot_curves("squad", ROWS, write=False) == tmp_path / "plots" / "squad-curves.png"
    assert not (tmp_path / "plots").exists()
    out = plots.plot_curves("squad", ROWS)
    first = out.read_bytes()
    assert out == tmp_path / "plots" / "squad-curves.png" and first.startswith(b"\x89PNG")
    assert plots.plot_curves("squad", ROWS).read_bytes() == first  # the same rows, the same bytes
    assert plots.plot_curves("squad", ROWS[:1]).read_bytes() != first
