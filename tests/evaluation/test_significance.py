"""Paired significance tests on per-question outcomes (multiview_plugin.evaluation.significance)."""

import numpy as np
import pytest

from multiview_plugin.evaluation.significance import (
    compare_ranks,
    hits_at,
    mcnemar_exact_test,
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


def test_the_exact_randomization_test_is_scipys_permutation_test_and_monte_carlo_agrees():
    """The exact sign-flip test is scipy.stats.permutation_test's; the seeded Monte Carlo estimate (the draws the
    committed records used) agrees with scipy's own Monte Carlo estimate within their error."""
    from scipy import stats

    rng = np.random.default_rng(5)
    a, b = rng.normal(size=40), rng.normal(size=40)
    d = a - b

    def two_sided(x, axis=-1):
        return np.abs(np.mean(x, axis=axis))

    mc = stats.permutation_test((d,), two_sided, permutation_type="samples", n_resamples=2000,
                                alternative="greater", rng=np.random.default_rng(7)).pvalue
    assert paired_randomization_test(a, b, num_permutations=2000, seed=7) == pytest.approx(mc, abs=0.03)
    exact = stats.permutation_test((d[:10],), two_sided, permutation_type="samples", n_resamples=np.inf,
                                   alternative="greater").pvalue
    assert paired_randomization_test(a[:10], b[:10]) == pytest.approx(exact)


def test_exact_mcnemar_known_values_and_agreement_with_the_exact_randomization_test():
    # 5 wins, 0 losses: 2/32; 3 wins, 1 loss: 10/16; 30 wins: 2/2^30 (the Monte Carlo estimate stops at 1/(N+1))
    assert mcnemar_exact_test([1] * 5 + [0] * 10, [0] * 15) == pytest.approx(2 / 32)
    assert mcnemar_exact_test([1, 1, 1, 0], [0, 0, 0, 1]) == pytest.approx(10 / 16)
    assert mcnemar_exact_test([1] * 30, [0] * 30) == pytest.approx(2 / 2 ** 30, rel=1e-12)
    # 2 wins 9 losses of 11 discordant: two-sided binomial sum_{k<=2} C(11,k)/2^11 * 2 = 2*(1+11+55)/2048
    assert mcnemar_exact_test([1, 1] + [0] * 9, [0, 0] + [1] * 9) == pytest.approx(2 * 67 / 2048)
    assert mcnemar_exact_test([1, 0, 1], [1, 0, 1]) == 1.0
    rng = np.random.default_rng(3)
    for _ in range(20):  # 0/1 outcomes: the exact sign-flip test and exact McNemar are one test
        a, b = rng.integers(0, 2, 25), rng.integers(0, 2, 25)
        if np.count_nonzero(a != b) <= 16:
            assert mcnemar_exact_test(a, b) == pytest.approx(paired_randomization_test(a, b), rel=1e-9)
    with pytest.raises(ValueError, match="0/1 outcomes"):
        mcnemar_exact_test([0.5, 1.0], [0.0, 1.0])


def test_compare_ranks_names_both_tests():
    out = compare_ranks([0] * 40, [-1] * 40, num_permutations=100)
    assert out["p_value"] == pytest.approx(1 / 101) and "100 sign flips, seed 0" in out["p_test"]
    assert out["p_value_exact"] == pytest.approx(2 / 2 ** 40) and "exact McNemar" in out["p_test_exact"]
    assert "40 questions differ" in out["p_test_exact"]


def test_published_monte_carlo_p_values_reproduce():
    """The seeded Monte Carlo p (10000 sign flips, seed 0: every committed record's) is the number the code
    before scipy gave for the same outcomes (0.08299170082991701, computed there), and near the exact value."""
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    p = paired_randomization_test(a, b, num_permutations=10_000, seed=0)
    assert p == 0.08299170082991701
    assert p == pytest.approx(mcnemar_exact_test(a, b), abs=0.01)


def test_one_differing_question_gives_p_one():
    # both sign patterns of a single non-zero difference have the same |mean|: exact p = 1 (scipy's
    # permutation_test refuses one observation; the docs' significance example on tiny data met it)
    from multiview_plugin.evaluation.significance import paired_randomization_test

    assert paired_randomization_test([1.0, 0.0, 1.0], [0.0, 0.0, 1.0]) == 1.0
