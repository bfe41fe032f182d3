"""Paired significance tests on per-question outcomes (two systems, the same questions).

Each question gives one number per system -- here a top-k hit (1 or 0) read from the rank of its first
answer-bearing (or relevant) passage -- and the question is whether the mean difference could be chance.

* :func:`paired_randomization_test` -- Fisher's paired randomization (sign-flip permutation) test, the test
  Smucker, Allan and Carterette (CIKM 2007, "A comparison of statistical significance tests for information
  retrieval evaluation") recommend for IR: under the null hypothesis the two systems' labels are exchangeable
  per question, so each per-question difference keeps or flips its sign with probability 1/2. Two-sided:
  ``p = P(|mean of flipped differences| >= |observed mean difference|)``. Exact (all ``2^n`` sign patterns of
  the non-zero differences, ``scipy.stats.permutation_test`` with ``permutation_type="samples"``) when there are
  at most ``exact_max`` of them, else Monte Carlo with a fixed seed and the ``(b + 1) / (N + 1)`` estimate of
  Phipson and Smyth (2010), which is never 0, from the seeded draws the committed records used (so their
  p-values reproduce; the records' ``p_test`` says which of the two each used).
* :func:`mcnemar_exact_test` -- the exact McNemar test of binary outcomes (a two-sided binomial test on the
  questions where exactly one system hits). For 0/1 outcomes every non-zero difference is +-1, so this *is* the
  randomization test's exact value for any number of questions: exact small p-values where the Monte Carlo
  estimate stops at ``1 / (N + 1)``.
* :func:`paired_t_test` -- Student's paired t-test (scipy's ``ttest_rel``), two-sided.

Per-question outcomes are stored compactly as ranks: ``ranks[i]`` is the 0-based rank of question ``i``'s first
answer-bearing passage, -1 when none is within the evaluated depth (:func:`hits_at`).

>>> paired_randomization_test([1, 1, 1, 1, 1], [0, 0, 0, 0, 0])  # exact: 2 of the 32 sign patterns
0.0625
>>> paired_randomization_test([1, 0, 1], [1, 0, 1])
1.0
>>> mcnemar_exact_test([1] * 30, [0] * 30)  # 2 / 2^30
1.862645149230957e-09
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence

import numpy as np

logger = logging.getLogger(__name__)

RANDOMIZATION = "paired randomization"
MCNEMAR = "exact McNemar"
T_TEST = "paired t-test"
EXACT_MAX = 16
# a Monte Carlo test's sample size, as a row's p_test names it ("10000 sign flips", "9999 resamples")
_SAMPLED = re.compile(r"(\d+) (?:sign flips|permutations|resamples)")


def hits_at(ranks: Sequence[int], k: int = 1) -> np.ndarray:
    """1.0 where a question's first answer-bearing passage ranks within the top ``k`` (rank < k, -1 = none)."""
    r = np.asarray(ranks, dtype=np.int64)
    return ((r >= 0) & (r < k)).astype(np.float64)


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired outcomes need two 1-D arrays of one length, got shapes {x.shape} and {y.shape}")
    if not len(x):
        raise ValueError("paired outcomes are empty")
    return x - y


def _abs_mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The two-sided statistic: ``|mean difference|`` (its upper tail is the two-sided p of the sign flips)."""
    return np.abs(np.mean(x, axis=axis))


def paired_randomization_test(a: Sequence[float], b: Sequence[float], num_permutations: int = 10_000,
                              seed: int = 0, exact_max: int = EXACT_MAX) -> float:
    """Two-sided p-value of the paired randomization test of ``mean(a - b) = 0`` (see the module docstring).

    Parameters
    ----------
    a, b : sequences of float
        Per-question outcomes of the two systems, in the same question order.
    num_permutations : int
        Random sign patterns drawn when the test is not exact.
    seed : int
        Seed of the sign patterns (the same inputs and seed give the same p).
    exact_max : int
        Enumerate all sign patterns when at most this many differences are non-zero (zeros never change the
        statistic).
    """
    d = _differences(a, b)
    d = d[d != 0]
    if len(d) < 2:  # no or one differing question: every sign pattern gives the same |mean| (scipy needs two)
        return 1.0
    if len(d) <= exact_max:
        from scipy import stats

        return float(stats.permutation_test((d,), _abs_mean, permutation_type="samples", vectorized=True,
                                            n_resamples=np.inf, alternative="greater").pvalue)
    if num_permutations < 1:
        raise ValueError(f"num_permutations must be positive, got {num_permutations}")
    return _seeded_sign_flips(d, num_permutations, seed)


def _seeded_sign_flips(d: np.ndarray, num_permutations: int, seed: int) -> float:
    """The Monte Carlo estimate ``(b + 1) / (N + 1)`` from numpy's ``default_rng(seed)`` sign patterns, drawn in
    the order every committed record's ``... sign flips, seed S`` p-value was drawn: kept so those p-values
    reproduce exactly (``scipy.stats.permutation_test(..., rng=seed)`` estimates the same p from other draws,
    which would move the published values by their Monte Carlo error; :func:`mcnemar_exact_test` gives the exact
    value for hits)."""
    observed = abs(d.sum())
    tol = 1e-9 * max(1.0, observed)
    rng = np.random.default_rng(seed)
    extreme, done, chunk = 0, 0, max(1, min(num_permutations, 2_000_000 // len(d)))
    while done < num_permutations:
        m = min(chunk, num_permutations - done)
        signs = rng.integers(0, 2, size=(m, len(d)), dtype=np.int8).astype(np.float64) * 2 - 1
        extreme += int(np.sum(np.abs(signs @ d) >= observed - tol))
        done += m
    return (extreme + 1) / (num_permutations + 1)


def mcnemar_exact_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the exact McNemar test of paired 0/1 outcomes (scipy's ``binomtest`` of the
    questions only ``a`` hits among those where exactly one system hits, p = 1/2); 1.0 when none differ."""
    from scipy import stats

    d = _differences(a, b)
    if not np.all(np.isin(np.asarray(a, dtype=np.float64), (0.0, 1.0))
                  & np.isin(np.asarray(b, dtype=np.float64), (0.0, 1.0))):
        raise ValueError("the exact McNemar test needs 0/1 outcomes (hits); use paired_randomization_test")
    wins, losses = int(np.sum(d > 0)), int(np.sum(d < 0))
    if not wins + losses:
        return 1.0
    return float(stats.binomtest(wins, wins + losses, 0.5).pvalue)


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Student's paired t-test (scipy); 1.0 when the two systems never differ."""
    from scipy import stats

    d = _differences(a, b)
    if not np.any(d):
        return 1.0
    if np.all(d == d[0]):  # no variance: the t statistic is infinite
        return 0.0
    p = float(stats.ttest_rel(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)).pvalue)
    return 0.0 if math.isnan(p) else p  # nan only when every difference is the same non-zero value


def compare_ranks(ranks: Sequence[int], baseline: Sequence[int], k: int = 1, num_permutations: int = 10_000,
                  seed: int = 0) -> dict:
    """Top-``k`` hits of a system against a baseline on the same questions: the fields a results row carries
    (``p_value`` and ``p_test``: the paired randomization test, as every record has it; ``p_value_exact``: the
    exact McNemar test, ``p_value_ttest``; ``p_delta``: the difference of the top-k accuracies, in %)."""
    a, b = hits_at(ranks, k), hits_at(baseline, k)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} per-question outcomes against a baseline with {len(b)}: not the same questions")
    differing = int(np.count_nonzero(a != b))
    how = (f"exact over {2 ** differing} sign patterns" if differing <= EXACT_MAX
           else f"{num_permutations} sign flips, seed {seed}")
    return {"p_value": paired_randomization_test(a, b, num_permutations, seed, EXACT_MAX),
            "p_test": f"{RANDOMIZATION} (two-sided, top-{k} hits, {how})",
            "p_value_exact": mcnemar_exact_test(a, b),
            "p_test_exact": f"{MCNEMAR} (two-sided binomial, top-{k} hits, {differing} questions differ)",
            "p_value_ttest": paired_t_test(a, b),
            "p_delta": 100.0 * float(a.mean() - b.mean())}


def at_floor(p: float, test: str | None) -> int | None:
    """``N`` when ``p`` is the floor ``1 / (N + 1)`` of the Monte Carlo test ``test`` names (no sampled sign
    pattern of ``N`` was as extreme as the observed one, so ``p`` bounds the p-value rather than measures it);
    None otherwise (exact tests and t-tests have no floor)."""
    sampled = _SAMPLED.search(test or "")
    if sampled and p <= (1 + 1e-9) / (int(sampled.group(1)) + 1):
        return int(sampled.group(1))
    return None


def format_p(p: float | None, test: str | None = None) -> str:
    """A p-value as tables and logs print it: two significant digits, or ``< 1/N`` at its Monte Carlo test's
    floor (10,000 sign flips: ``< 0.0001``); '' for None.

    >>> format_p(1 / 10001, "paired randomization (two-sided, top-1 hits, 10000 sign flips, seed 0)")
    '< 0.0001'
    >>> format_p(0.0033, "paired randomization (two-sided, top-1 hits, 10000 sign flips, seed 0)")
    '0.0033'
    """
    if p is None:
        return ""
    floor = at_floor(p, test)
    return f"< {1 / floor:.2g}" if floor else f"{p:.2g}"
