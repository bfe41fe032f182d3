"""Tests of multiview_plugin/driver/backends.py: the index / search backend and calibration flags shared by the
index and search drivers (calibration itself: tests/search/test_calibrate.py)."""

from __future__ import annotations

import argparse

import pytest

from multiview_plugin.driver.backends import (
    add_calibration_flags,
    calibration_verdict,
    check_calibration_flags,
)
from multiview_plugin.errors import ConfigError


def _calibration_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_calibration_flags(parser)
    return parser.parse_args(list(argv))


def test_calibration_flags_are_checked_in_one_line():
    check_calibration_flags(_calibration_args())
    check_calibration_flags(_calibration_args("--target_recall", "0.9"))
    for value in ("1.5", "-0.1", "nan"):
        with pytest.raises(ConfigError, match="^--target_recall must be 0 \\(no calibration\\) or in \\(0, 1\\]"):
            check_calibration_flags(_calibration_args("--target_recall", value))
    with pytest.raises(ConfigError, match="--calibration_queries and --calibration_k must be >= 1, got 0"):
        check_calibration_flags(_calibration_args("--target_recall", "0.9", "--calibration_queries", "0"))
    with pytest.raises(ConfigError, match="--calibration_query_reps with --target_recall 0"):
        check_calibration_flags(_calibration_args("--target_recall", "0", "--calibration_query_reps", "q.pkl"))


@pytest.mark.parametrize("record, verdict", [
    ({"target_recall": 0.95, "queries": 10, "reached": True}, "reaches target 0.95 and its margin"),
    ({"target_recall": 0.95, "queries": 10, "reached": True, "aim_reached": False},
     "reaches target 0.95, but not its margin"),
    ({"target_recall": 0.95, "queries": 10, "reached": False, "tied_queries": 2},
     "BELOW target 0.95; 2 of 10 queries tie at the cut-off"),
    ({"target_recall": 0.95, "queries": 3, "reached": True, "tied_queries": 3, "k": 10},
     "not measurable: every query's exact scores tie at the top-10 cut-off"),
])
def test_calibration_verdict_never_contradicts_itself(record, verdict):
    assert calibration_verdict(record).startswith(verdict)
