"""Paired significance tests on per-question outcomes (multiview_plugin.evaluation.significance)."""

import numpy as np
import pytest

from multiview_plugin.evaluation.significance import (
    compare_ranks,
    hits_at,
    paired_randomization_test,
    paired_t_test,
)


def test_identical_systems_give_p_one():
    a = np.random.default_rng(0).integers(0, 2, 500)
    assert paired_randomization_test(a, a) == 1.0
    assert paired_t_test(a, a) == 1.0
    assert compare_ranks([0, 3, -1, 0], [0, 3, -1, 0])["p_value"] == 1.0


def test_clearly_better_system_gives_a_tiny_p():
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2, 3000)
    better = np.where(rng.random(3000) < 0.3, 1, base)  # wins ~15% of questions, never loses
    p = paired_randomization_test(better, base, num_permutations=10_000, seed=0)
    assert p == 1 / 10_001  # no sign pattern reaches the observed difference: the smallest estimate
    assert paired_t_test(better, base) < 1e-10


def test_known_small_examples_are_exact():
    # 5 wins, 0 losses: of the 2^5 sign patterns only all-plus and all-minus reach |5|
    assert paired_randomization_test([1] * 5 + [0] * 10, [0] * 5 + [0] * 10) == pytest.approx(2 / 32)
    # 3 wins, 1 loss: |sum| >= 2 for patterns with >= 3 or <= 1 plus signs among the 4 -> (1+4+4+1)/16
    assert paired_randomization_test([1, 1, 1, 0], [0, 0, 0, 1]) == pytest.approx(10 / 16)
    # the sign test's value: 8 wins 0 losses, exact two-sided 2/256
    assert paired_randomization_test([1] * 8, [0] * 8) == pytest.approx(2 / 256)


def test_monte_carlo_agrees_with_the_exact_test_and_is_seeded():
    a = [1] * 14 + [0] * 6
    b = [0] * 8 + [1] * 6 + [0] * 6  # 8 wins, 0 losses, 6 ties... plus 6 shared hits
    exact = paired_randomization_test(a, b)
    mc = paired_randomization_test(a, b, num_permutations=20_000, seed=3, exact_max=0)
    assert exact == pytest.approx(2 / 256) and mc == pytest.approx(exact, abs=0.004)
    assert mc == paired_randomization_test(a, b, num_permutations=20_000, seed=3, exact_max=0)
    # a direction does not matter (two-sided)
    assert paired_randomization_test(b, a) == exact


def test_hits_at_reads_ranks_and_misses():
    assert hits_at([0, 1, -1, 4], 1).tolist() == [1, 0, 0, 0]
    assert hits_at([0, 1, -1, 4], 5).tolist() == [1, 1, 0, 1]


def test_compare_ranks_fields_and_length_check():
    out = compare_ranks([0] * 10, [-1] * 10, num_permutations=100)
    assert out["p_delta"] == 100.0 and out["p_value"] == pytest.approx(2 / 1024)
    assert "randomization" in out["p_test"] and "exact over 1024" in out["p_test"] and out["p_value_ttest"] == 0.0
    assert "100 sign flips, seed 0" in compare_ranks([0] * 40, [-1] * 40, num_permutations=100)["p_test"]
    with pytest.raises(ValueError, match="not the same questions"):
        compare_ranks([0, 1], [0])
