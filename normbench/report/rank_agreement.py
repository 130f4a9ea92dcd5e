"""Do two rankings of the same layers agree? Spearman's rho and its exact permutation p-value.

With six layers a rho of 0.77 is what one ordering in twenty gives by chance, so rho alone overstates agreement:
every rho the report prints (ranking transfer, rankings across budgets) comes with the share of the n! orderings
of one side whose rho is at least as large (one-sided: the question is whether the ranking *holds*). Pure.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

EXACT_UP_TO = 8          # 8! = 40,320 orderings: enumerated; more are sampled
SAMPLED_ORDERINGS = 20_000


def ranks(scores: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, 1 = the highest score, ties get the average of the ranks they span."""
    frame = pd.DataFrame(np.atleast_2d(scores))
    return frame.rank(axis=1, method="average", ascending=False).to_numpy().reshape(np.shape(scores))


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Spearman's rho along the last axis: Pearson's r of the average ranks; NaN where either side is constant."""
    ra, rb = ranks(np.asarray(a, dtype=float)), ranks(np.asarray(b, dtype=float))
    ra, rb = ra - ra.mean(axis=-1, keepdims=True), rb - rb.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((ra ** 2).sum(axis=-1) * (rb ** 2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(denominator > 0, (ra * rb).sum(axis=-1) / denominator, np.nan)
    return float(rho) if rho.ndim == 0 else rho


def permutation_p(a: np.ndarray, b: np.ndarray, *, seed: int = 0) -> float:
    """One-sided p of Spearman's rho(a, b): the share of orderings of `b` whose rho is at least the observed one.

    Exact over all n! orderings up to EXACT_UP_TO items (4 items: a multiple of 1/24), else estimated from
    SAMPLED_ORDERINGS random ones (counting the observed ordering, so never 0). NaN when rho is undefined.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    observed = spearman(a, b)
    if math.isnan(observed):
        return math.nan
    if len(b) <= EXACT_UP_TO:
        orderings = np.array(list(itertools.permutations(b)))
        rhos = spearman(np.broadcast_to(a, orderings.shape), orderings)
        return float(np.mean(rhos >= observed - 1e-12))
    rng = np.random.default_rng(seed)
    orderings = np.array([rng.permutation(b) for _ in range(SAMPLED_ORDERINGS)])
    rhos = spearman(np.broadcast_to(a, orderings.shape), orderings)
    return float((1 + np.sum(rhos >= observed - 1e-12)) / (1 + SAMPLED_ORDERINGS))


def swapped_pairs(names: list[str], a: np.ndarray, b: np.ndarray) -> list[tuple[str, str]]:
    """The pairs (x, y) that `a` orders x above y and `b` orders y above x (ties in either are not swaps)."""
    swaps = []
    for i, j in itertools.combinations(range(len(names)), 2):
        if (a[i] - a[j]) * (b[i] - b[j]) < 0:
            swaps.append((names[i], names[j]) if a[i] > a[j] else (names[j], names[i]))
    return swaps


def pooled_permutation_p(pairs: list[tuple[np.ndarray, np.ndarray]], *, seed: int = 0) -> float:
    """One-sided p of the mean of several rhos (one per depth): the share of independent orderings of every pair's
    `b` whose mean rho is at least the observed mean (sampled; a single pair is `permutation_p`)."""
    if len(pairs) == 1:
        return permutation_p(*pairs[0], seed=seed)
    observed = float(np.mean([spearman(a, b) for a, b in pairs]))
    if math.isnan(observed):
        return math.nan
    rng = np.random.default_rng(seed)
    total = np.zeros(SAMPLED_ORDERINGS)
    for a, b in pairs:
        orderings = np.array([rng.permutation(np.asarray(b, dtype=float)) for _ in range(SAMPLED_ORDERINGS)])
        total += spearman(np.broadcast_to(np.asarray(a, dtype=float), orderings.shape), orderings)
    return float((1 + np.sum(total / len(pairs) >= observed - 1e-12)) / (1 + SAMPLED_ORDERINGS))
