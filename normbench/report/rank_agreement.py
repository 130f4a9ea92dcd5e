"""Do two rankings of the same layers agree? Spearman's rho and its exact permutation p-value (scipy's).

With six layers a rho of 0.77 is what one ordering in twenty gives by chance, so rho alone overstates agreement:
every rho the report prints (ranking transfer, rankings across budgets) comes with the share of the n! orderings
of one side whose rho is at least as large (one-sided: the question is whether the ranking *holds*). Pure.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats

EXACT_UP_TO = 8          # 8! = 40,320 orderings: enumerated; more are sampled
SAMPLED_ORDERINGS = 20_000


def ranks(scores: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, 1 = the highest score, ties get the average of the ranks they span."""
    frame = pd.DataFrame(np.atleast_2d(scores))
    return frame.rank(axis=1, method="average", ascending=False).to_numpy().reshape(np.shape(scores))


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Spearman's rho along the last axis; NaN where either side is constant. One pair is scipy's `spearmanr`;
    rows of replicates (which `spearmanr` would correlate all against all) are what it computes, row by row:
    Pearson's r of the average ranks (`rankdata`, `pearsonr` along the axis)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        if a.ndim == 1 and b.ndim == 1:
            return float(stats.spearmanr(a, b).statistic)
        a, b = np.broadcast_arrays(a, b)
        return stats.pearsonr(stats.rankdata(a, axis=-1), stats.rankdata(b, axis=-1), axis=-1).statistic


def permutation_p(a: np.ndarray, b: np.ndarray, *, seed: int = 0) -> float:
    """One-sided p of Spearman's rho(a, b): the share of orderings of `b` whose rho is at least the observed one
    (scipy's `permutation_test`, pairings).

    Exact over all n! orderings up to EXACT_UP_TO items (4 items: a multiple of 1/24), else estimated from
    SAMPLED_ORDERINGS random ones (counting the observed ordering, so never 0). NaN when rho is undefined.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if math.isnan(spearman(a, b)):
        return math.nan
    resamples = math.inf if len(b) <= EXACT_UP_TO else SAMPLED_ORDERINGS
    return float(_test(a, b, resamples, np.random.default_rng(seed)).pvalue)


def _test(a: np.ndarray, b: np.ndarray, resamples: float, rng: np.random.Generator) -> stats.PermutationTestResult:
    return stats.permutation_test((b,), lambda y, axis=-1: np.asarray(spearman(a, y)), permutation_type="pairings",
                                  vectorized=True, n_resamples=resamples, alternative="greater", rng=rng)


def swapped_pairs(names: list[str], a: np.ndarray, b: np.ndarray) -> list[tuple[str, str]]:
    """The pairs (x, y) that `a` orders x above y and `b` orders y above x (ties in either are not swaps)."""
    swaps = []
    for i, j in itertools.combinations(range(len(names)), 2):
        if (a[i] - a[j]) * (b[i] - b[j]) < 0:
            swaps.append((names[i], names[j]) if a[i] > a[j] else (names[j], names[i]))
    return swaps


def pooled_permutation_p(pairs: list[tuple[np.ndarray, np.ndarray]], *, seed: int = 0) -> float:
    """One-sided p of the mean of several rhos (one per depth): the share of independent orderings of every pair's
    `b` whose mean rho is at least the observed mean (sampled; a single pair is `permutation_p`).

    scipy's test has no statistic over samples of different lengths, and it enumerates a pair of n! <
    SAMPLED_ORDERINGS orderings: each pair's null is drawn here (one generator, pair after pair, the way scipy
    draws a pairing: `Generator.permuted` of each row) and the mean compared as scipy compares (+1 for the observed).
    """
    if len(pairs) == 1:
        return permutation_p(*pairs[0], seed=seed)
    observed = float(np.mean([spearman(a, b) for a, b in pairs]))
    if math.isnan(observed):
        return math.nan
    rng = np.random.default_rng(seed)
    total = np.zeros(SAMPLED_ORDERINGS)
    for a, b in pairs:
        orderings = rng.permuted(np.tile(np.asarray(b, dtype=float), (SAMPLED_ORDERINGS, 1)), axis=-1)
        total += spearman(a, orderings)
    tolerance = abs(observed) * np.finfo(float).eps * 100  # scipy's permutation_test's, for rhos equal but rounded
    return float((1 + np.sum(total / len(pairs) >= observed - tolerance)) / (1 + SAMPLED_ORDERINGS))
