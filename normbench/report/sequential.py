"""Group-sequential paired t tests for claims that add seeds in rounds: look after each round without inflating
the error rate.

A claim is tested after each round of report seeds (a "look"). Testing each look at ALPHA would reject a true null
far more often than ALPHA (4 looks at 4, 8, 12 and 16 seeds, each at 0.05: 0.13). Lan & DeMets (1983) spend the
error rate over the looks instead: a spending function alpha(t) says how much of it may be used up by information
fraction t (here n / the suite's cap on seeds), and look k's nominal level is the one at which the chance under the
null of stopping first at look k is alpha(t_k) - alpha(t_{k-1}). Two spending functions (Lan & DeMets 1983; Jennison
& Turnbull 2000, sec. 7.2):

- `pocock`: alpha * ln(1 + (e - 1) t), near-flat levels: an early look can stop a claim whose effect is large, which
  is what a benchmark short of compute needs (the default);
- `obrien_fleming`: 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), which keeps almost all of alpha for the last look.

The looks are paired t tests on 4, 8, ... seeds, not z tests: the normal-theory levels (the "significance level
approach", Jennison & Turnbull 2000, sec. 3.8) let the t tests' error rate reach 0.054 at these few degrees of
freedom (measured: 200,000 null paths). So each level is calibrated on the t tests themselves: under the null the
paths of t statistics do not depend on the unknown sd, so the levels are found on NULL_PATHS simulated standard
normal paths (a fixed seed: a deterministic function of the looks), each later look's level being the quantile of
the p-values of the paths not stopped yet that stops the spent share (the first look's is exact: a t test's p is
uniform). tests/report/test_sequential.py checks the error rate on fresh paths. A claim's p across its looks is its
repeated p-value (Jennison & Turnbull 2000, ch. 9): the smallest alpha at which the design would have stopped at one
of them, a valid p-value that Holm's procedure adjusts over a leaderboard's claims.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

SPENDING = ("pocock", "obrien_fleming")
NULL_PATHS = 100_000  # the levels' Monte Carlo error: about ±0.0007 on a 0.05 error rate
NULL_SEED = 61  # fixed, so that every leaderboard regenerates to the same digits


def spent(t: float, alpha: float, spending: str) -> float:
    """The two-sided error rate spent by information fraction `t` (capped at 1), Lan & DeMets (1983)."""
    from scipy.special import ndtr, ndtri

    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    if spending == "obrien_fleming":
        return float(2 * ndtr(ndtri(alpha / 2) / math.sqrt(t)))  # 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))
    raise ValueError(f"spending must be one of {SPENDING}, not {spending!r}")


def fractions_of(sizes: Sequence[int], cap: int) -> list[float]:
    """Each look's information fraction n / cap (1 at and past the cap)."""
    return [min(1.0, n / cap) for n in sizes]


def t_levels(sizes: Sequence[int], cap: int, alpha: float, spending: str = "pocock") -> list[float]:
    """The nominal two-sided levels of paired t tests at `sizes` pairs (increasing, each >= 2) under the design
    spending `alpha` up to `cap` pairs: a look whose p-value is below its level stops."""
    sizes = tuple(int(n) for n in sizes)
    if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)) or not sizes or sizes[0] < 2:
        raise ValueError(f"look sizes must increase from at least 2 pairs, got {sizes}")
    fractions = fractions_of(sizes, cap)
    if any(b <= a for a, b in zip(fractions, fractions[1:], strict=False)):
        raise ValueError(f"only one look may reach the cap of {cap} pairs, got {sizes}")
    levels = [spent(fractions[0], alpha, spending)]  # a t test's p is uniform under the null: exact
    if len(sizes) == 1:
        return levels
    paths = _null_pvalues(sizes)
    alive = paths[0] >= levels[0]
    before = levels[0]
    for k, t in enumerate(fractions[1:], start=1):
        share = spent(t, alpha, spending) - before
        before += share
        levels.append(_stopping_level(paths[k][alive], share * paths.shape[1]))
        alive &= paths[k] >= levels[-1]
    return levels


def _stopping_level(pvalues: np.ndarray, count: float) -> float:
    """The level below which `count` of the `pvalues` (the paths still going) lie: midway between neighbours."""
    m = int(round(count))
    if m <= 0:
        return 0.0
    if m >= len(pvalues):
        return 1.0
    lower, upper = np.partition(pvalues, [m - 1, m])[[m - 1, m]]
    return float((lower + upper) / 2)


@lru_cache(maxsize=32)
def _null_pvalues(sizes: tuple[int, ...]) -> np.ndarray:
    """(looks, NULL_PATHS) two-sided one-sample t test p-values on the first n of each path of standard normals."""
    from scipy.special import stdtr

    # pair by pair (rows): the first n pairs of every path are the same draws whatever the last look, so a look's
    # level does not depend on the looks after it
    x = np.random.default_rng(NULL_SEED).standard_normal((sizes[-1], NULL_PATHS)).T
    total, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
    rows = []
    for n in sizes:
        mean = total[:, n - 1] / n
        variance = np.maximum(squares[:, n - 1] - n * mean * mean, 0.0) / (n - 1)
        t = mean / np.sqrt(variance / n)
        rows.append(2 * stdtr(n - 1, -np.abs(t)))
    return np.vstack(rows)


def repeated_p(pvalues: Sequence[float], sizes: Sequence[int], cap: int, spending: str = "pocock") -> float:
    """The repeated p-value after looks with p-values `pvalues` at `sizes` pairs: the smallest alpha at which the
    design would have stopped at one of them (the min over looks k of the alpha whose level at look k is p_k). A
    NaN p (no spread to test) never stops. 1 when no look would stop at any alpha."""
    from scipy import optimize

    best = 1.0
    for k, p in enumerate(pvalues):
        if not p == p:
            continue
        looks = list(sizes[:k + 1])

        def gap(alpha: float, looks: list[int] = looks, p: float = p) -> float:
            return t_levels(looks, cap, alpha, spending)[-1] - p

        if gap(best) <= 0:  # at the smallest alpha that stopped so far (or 1) this look goes on: it cannot lower it
            continue
        if gap(1e-12) > 0:
            return 0.0
        best = min(best, float(optimize.brentq(gap, 1e-12, 1.0, xtol=1e-12, rtol=1e-6)))
    return best


def look_sizes(n: int, round_seeds: int) -> list[int]:
    """The pair counts at which a claim with `n` paired seeds was looked at: after each whole round of
    `round_seeds`, and at `n` itself when the last round is short (a seed that failed for good)."""
    if n < 2:
        return []
    sizes = [s for s in range(round_seeds, n + 1, round_seeds) if s >= 2] if round_seeds > 0 else []
    return sizes if sizes and sizes[-1] == n else [*sizes, n]
