"""normbench.report.sequential: alpha spending over looks at rounds of seeds, checked by simulation on fresh paths
(not the seed the levels were calibrated on)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from normbench.report.sequential import look_sizes, repeated_p, spent, t_levels

LOOKS = [4, 8, 12, 16]


def null_pvalues(paths: int, seed: int, effect: float = 0.0) -> list[np.ndarray]:
    """Per look, the two-sided paired t test p-values of `paths` fresh runs of 16 differences N(effect, 1)."""
    x = np.random.default_rng(seed).normal(effect, 1.0, size=(paths, LOOKS[-1]))
    return [stats.ttest_1samp(x[:, :n], 0.0, axis=1).pvalue for n in LOOKS]


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
def test_looking_after_every_round_keeps_the_false_positive_rate_at_alpha(spending):
    """Under the null, the rule (stop at the first look whose t test p is below its level) rejects 5% of 40,000
    fresh runs (±0.33 points: three binomial standard errors); testing each look at 0.05 would reject ~13%."""
    pvalues = null_pvalues(40_000, seed=2026)
    levels = t_levels(LOOKS, 16, 0.05, spending)
    stopped = np.zeros(len(pvalues[0]), dtype=bool)
    naive = np.zeros_like(stopped)
    for p, level in zip(pvalues, levels, strict=True):
        stopped |= p < level
        naive |= p < 0.05
    assert stopped.mean() == pytest.approx(0.05, abs=0.0033)
    assert naive.mean() > 0.11  # why the spending is needed at all


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
def test_each_look_stops_the_share_its_spending_function_gives(spending):
    pvalues = null_pvalues(40_000, seed=7)
    levels = t_levels(LOOKS, 16, 0.05, spending)
    going = np.ones(len(pvalues[0]), dtype=bool)
    before = 0.0
    for p, level, n in zip(pvalues, levels, LOOKS, strict=True):
        stops = going & (p < level)
        share = spent(n / 16, 0.05, spending) - before
        before += share
        assert stops.mean() == pytest.approx(share, abs=3 * math.sqrt(share / len(p)) + 1e-4)
        going &= ~stops


def test_the_spending_functions_are_lan_and_demets():
    assert spent(1.0, 0.05, "pocock") == pytest.approx(0.05) and spent(1.0, 0.05, "obrien_fleming") == pytest.approx(
        0.05)
    assert spent(0.25, 0.05, "pocock") == pytest.approx(0.05 * math.log(1 + (math.e - 1) / 4))
    assert spent(0.25, 0.05, "obrien_fleming") == pytest.approx(2 * stats.norm.sf(1.959964 / 0.5), rel=1e-5)
    assert spent(0.0, 0.05, "pocock") == 0.0 and spent(2.0, 0.05, "pocock") == pytest.approx(0.05)  # capped at 1
    with pytest.raises(ValueError, match="spending"):
        spent(0.5, 0.05, "haybittle")


def test_one_look_at_the_cap_is_the_fixed_size_test():
    assert t_levels([6], 6, 0.05) == pytest.approx([0.05])
    assert repeated_p([0.03], [6], 6) == pytest.approx(0.03, rel=1e-6)


def test_the_first_look_is_exact_and_its_repeated_p_inverts_the_spending():
    # a t test's p is uniform under the null whatever n: the first look's level is the spent share itself
    assert t_levels([4], 16, 0.05) == pytest.approx([spent(0.25, 0.05, "pocock")])
    assert repeated_p([0.01], [4], 16) == pytest.approx(0.01 / math.log(1 + (math.e - 1) * 0.25), rel=1e-6)
    # O'Brien-Fleming: alpha = 2 - 2 Phi(sqrt(t) z_{1-p/2})
    assert repeated_p([0.001], [4], 16, "obrien_fleming") == pytest.approx(
        2 * stats.norm.sf(0.5 * stats.norm.isf(0.0005)), rel=1e-5)


def test_the_repeated_p_is_the_smallest_alpha_that_stopped_and_agrees_with_the_rule():
    pvalues = [0.2, 0.004, 0.03]
    p = repeated_p(pvalues, LOOKS[:3], 16)
    # at alpha = p the second look sits on its level; just above it stops there, just below nothing stops
    assert t_levels(LOOKS[:2], 16, p)[-1] == pytest.approx(0.004, rel=1e-2)  # a Monte Carlo quantile: steps
    assert any(q < level for q, level in zip(pvalues, t_levels(LOOKS[:3], 16, p * 1.01), strict=True))
    assert not any(q < level for q, level in zip(pvalues, t_levels(LOOKS[:3], 16, p * 0.99), strict=True))
    assert repeated_p([math.nan, 0.9], LOOKS[:2], 16) == 1.0  # a NaN look never stops; 0.9 never at alpha < 1


def test_a_repeated_p_below_alpha_is_the_rule_stopping_at_alpha():
    """So its false positive rate is the rule's (the simulation above): a valid p-value for Holm."""
    pvalues = null_pvalues(24, seed=11, effect=0.6)  # some stop, some do not
    for i in range(24):
        path = [p[i] for p in pvalues]
        stops = any(q < level for q, level in zip(path, t_levels(LOOKS, 16, 0.05), strict=True))
        assert (repeated_p(path, LOOKS, 16) <= 0.05) == stops


def test_levels_are_a_deterministic_function_of_the_looks():
    assert t_levels(LOOKS, 16, 0.05) == t_levels(LOOKS, 16, 0.05)
    assert t_levels(LOOKS[:2], 16, 0.05) == t_levels(LOOKS, 16, 0.05)[:2]  # a later look changes no earlier level
    with pytest.raises(ValueError, match="increase"):
        t_levels([8, 4], 16, 0.05)
    with pytest.raises(ValueError, match="cap"):
        t_levels([16, 20], 16, 0.05)


@pytest.mark.parametrize(("n", "round_seeds", "expected"), [
    (4, 4, [4]), (8, 4, [4, 8]), (7, 4, [4, 7]), (1, 4, []), (3, 0, [3]), (16, 4, [4, 8, 12, 16]),
])
def test_look_sizes(n, round_seeds, expected):
    assert look_sizes(n, round_seeds) == expected
