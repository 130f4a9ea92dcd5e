"""normbench.report.rank_agreement: Spearman's rho, its exact permutation p (hand-counted for four items), swaps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from normbench.report.rank_agreement import permutation_p, pooled_permutation_p, spearman, swapped_pairs


def test_the_permutation_p_of_four_items_counts_orderings_by_hand():
    a = [4.0, 3.0, 2.0, 1.0]
    # identical orders: only 1 of the 4! = 24 orderings reaches rho = 1
    assert spearman(a, [40.0, 30.0, 20.0, 10.0]) == pytest.approx(1.0)
    assert permutation_p(a, [40.0, 30.0, 20.0, 10.0]) == pytest.approx(1 / 24)
    # one adjacent swap: rho = 1 - 6 * 2 / (4 * 15) = 0.8; rho >= 0.8 means sum(d^2) <= 2: the identity and the
    # three adjacent swaps, 4 of 24
    assert spearman(a, [30.0, 40.0, 20.0, 10.0]) == pytest.approx(0.8)
    assert permutation_p(a, [30.0, 40.0, 20.0, 10.0]) == pytest.approx(4 / 24)
    # reversed: every ordering has rho >= -1
    assert permutation_p(a, [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert math.isnan(permutation_p(a, [5.0, 5.0, 5.0, 5.0]))  # a constant side has no rho


def test_six_layers_in_the_same_order_give_one_in_720():
    a = np.arange(6, dtype=float)
    assert permutation_p(a, a * 2) == pytest.approx(1 / 720)


def test_a_pooled_p_over_depths_is_smaller_than_either_depths_alone():
    pair = (np.arange(4, dtype=float), np.arange(4, dtype=float))
    pooled = pooled_permutation_p([pair, pair])
    assert pooled < 1 / 24 and pooled == pytest.approx(1 / 576, abs=0.002)  # both at rho = 1: 1 in 24 * 24


def test_swapped_pairs_name_the_pairs_that_change_order():
    names = ["layernorm", "layerscale", "rezero"]
    assert swapped_pairs(names, np.array([3.0, 2.0, 1.0]), np.array([2.0, 3.0, 1.0])) == [("layernorm", "layerscale")]
    assert swapped_pairs(names, np.array([3.0, 2.0, 1.0]), np.array([3.0, 2.0, 1.0])) == []


def test_rows_of_replicates_get_each_rows_own_rho_as_scipy_computes_one_pair():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(50, 6)), rng.normal(size=(50, 6))
    b[0] = 2.0  # a constant row has no rho
    rows = spearman(a, b)
    assert math.isnan(rows[0])
    assert rows[1:] == pytest.approx([spearmanr(x, y).statistic for x, y in zip(a[1:], b[1:], strict=True)])


def test_nine_items_are_sampled_and_never_give_0():
    a = np.arange(9, dtype=float)
    p = permutation_p(a, a)
    assert 0 < p < 5 / 20_001 and p == permutation_p(a, a)  # the observed ordering counts; the seed is fixed
