"""normbench.report.stats against hand-computed values (t quantiles from tables: t(0.975, 1) = 12.7062,
t(0.975, 2) = 4.3027, t(0.975, 3) = 3.1824)."""

from __future__ import annotations

import math
import warnings

import pandas as pd
import pytest

from normbench.contracts.selection import add_scores, chosen_lrs
from normbench.report.stats import (
    POWER,
    detectable_effect,
    edge,
    holm,
    holm_levels,
    lr_sensitivity,
    paired_p,
    select_lr,
    selected_cells,
    sensitivity_difference,
    separation,
    t_interval,
    verdict,
    versus_baseline,
)
from normbench.report.tables import BASELINE_VERDICTS
from normbench.report.transfer import TRANSFER_VERDICTS


def cell(layer: str, lr: float, seed: int, val: float, test: float, status: str = "ok", depth: int = 12) -> dict:
    return {"layer": layer, "depth": depth, "lr": lr, "seed": seed, "status": status, "best_val_top1": val + 1,
            "val_top1": val if status == "ok" else math.nan, "test_top1": test if status == "ok" else math.nan}


def test_t_interval_matches_the_hand_computed_interval():
    mean, low, high = t_interval([80.0, 82.0])  # sd sqrt(2), se 1: half-width t(0.975, 1) * 1
    assert mean == 81.0 and low == pytest.approx(81 - 12.7062, abs=1e-3) and high == pytest.approx(93.7062, abs=1e-3)
    mean, low, high = t_interval([1.0, 2.0, 3.0, 4.0])  # sd 1.29099, se 0.645497: half-width 3.18245 * se = 2.05426
    assert (mean, low, high) == pytest.approx((2.5, 0.44574, 4.55426), abs=1e-4)
    mean, low, high = t_interval([70.0])
    assert mean == 70.0 and math.isnan(low) and math.isnan(high)  # one seed: no interval, never a fake ±0


def test_scores_are_final_epoch_val_and_test_and_a_diverged_cell_scores_zero():
    cells = add_scores(pd.DataFrame([cell("a", 1e-3, 0, 70.0, 68.0), cell("a", 3e-3, 0, 0, 0, status="diverged")]))
    assert cells["select"].tolist() == [70.0, 0.0] and cells["score"].tolist() == [68.0, 0.0]
    assert not cells.attrs["legacy"]
    old = add_scores(pd.DataFrame([cell("a", 1e-3, 0, 70.0, 68.0)]).drop(columns=["val_top1", "test_top1"]))
    assert old["score"].tolist() == [71.0] and old.attrs["legacy"]  # an old ledger: best val, and said so


def grid() -> pd.DataFrame:
    return add_scores(pd.DataFrame([
        # layernorm: val prefers 1e-3 (mean 81 vs 80); test would prefer 3e-3 (mean 85 vs 79)
        cell("layernorm", 1e-3, 0, 80.0, 78.0), cell("layernorm", 1e-3, 1, 82.0, 80.0),
        cell("layernorm", 3e-3, 0, 79.0, 84.0), cell("layernorm", 3e-3, 1, 81.0, 86.0),
        cell("layernorm", 1e-2, 0, 0.0, 0.0, "diverged"), cell("layernorm", 1e-2, 1, 60.0, 61.0),
        cell("rezero", 1e-3, 0, 70.0, 69.0), cell("rezero", 1e-3, 1, 72.0, 71.0),
        cell("rezero", 3e-3, 0, 75.0, 74.0), cell("rezero", 3e-3, 1, 77.0, 76.0),
        cell("rezero", 1e-2, 0, 86.0, 85.0), cell("rezero", 1e-2, 1, 88.0, 87.0),
    ]))


def test_select_lr_chooses_on_val_reports_test_and_flags_the_edge():
    table = select_lr(grid(), ["layer"]).set_index("layer")
    ln = table.loc["layernorm"]
    assert ln["lr"] == 1e-3 and ln["mean"] == 79.0 and ln["n"] == 2  # val's choice, test's number
    assert ln["low"] == pytest.approx(79 - 12.7062, abs=1e-3)
    assert ln["edge"] == "low" and ln["diverged"] == 1 and ln["cells"] == 6
    # window: lrs whose test mean lies within [66.29, 91.71]: 1e-3 (79) and 3e-3 (85), not 1e-2 (30.5)
    assert (ln["window_low"], ln["window_high"]) == (1e-3, 3e-3)
    assert table.loc["rezero", "lr"] == 1e-2 and table.loc["rezero", "edge"] == "high"
    assert edge([1e-3, 3e-3, 1e-2], 3e-3) == "" and edge([3e-3], 3e-3) == "only"


def test_selection_never_reads_test():
    cells = grid()
    chosen = select_lr(cells, ["layer"])[["layer", "lr"]]
    poisoned = cells.copy()
    poisoned["score"] = [1000.0 * (i % 3) for i in range(len(cells))]  # test scores that would flip every choice
    poisoned["test_top1"] = poisoned["score"]
    assert select_lr(poisoned, ["layer"])[["layer", "lr"]].equals(chosen)
    flipped = cells.copy()
    flipped["select"] = -flipped["select"]  # and it does read val: flipping val changes the choice
    assert not select_lr(flipped, ["layer"])[["layer", "lr"]].equals(chosen)


def paired_cells(diffs: list[float], base: str = "layernorm", missing_seed: int | None = None) -> pd.DataFrame:
    rows = []
    for seed, d in enumerate(diffs):
        rows.append(cell("learnable_scaler", 1e-3, seed, 70.0, 70.0 + d, depth=36))
        if seed != missing_seed:
            rows.append(cell(base, 1e-3, seed, 70.0, 70.0, depth=36))
    return add_scores(pd.DataFrame(rows))


def test_paired_comparison_against_the_baseline_over_matched_seeds():
    cells = paired_cells([2.0, 5.0, 2.0])  # mean 3, sd sqrt(3), se 1: half-width t(0.975, 2) = 4.3027
    selected = select_lr(cells, ["layer", "depth"])
    row = versus_baseline(cells, selected, ["layer", "depth"], "layernorm").iloc[0]
    assert (row["layer"], row["depth"], row["n"]) == ("learnable_scaler", 36, 3)
    assert (row["mean"], row["low"], row["high"]) == pytest.approx((3.0, -1.3027, 7.3027), abs=1e-4)
    cells = paired_cells([2.0, 5.0, 9.0], missing_seed=2)  # seed 2 has no baseline: only seeds 0 and 1 pair
    row = versus_baseline(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], "layernorm").iloc[0]
    assert row["n"] == 2 and row["mean"] == 3.5


@pytest.mark.parametrize(("low", "high", "claim", "transfer", "baseline"), [
    (0.5, 2.0, "supported", "holds", "better"),
    (-2.0, -0.5, "contradicted", "reversed", "worse"),
    (-1.0, 1.0, "inconclusive", "not settled", "no clear difference"),
    (0.0, 1.0, "inconclusive", "not settled", "no clear difference"),  # touching 0 is not above it
    (math.nan, math.nan, "inconclusive", "not settled", "no CI (one seed)"),
])
def test_one_verdict_rule_in_each_sections_words(low, high, claim, transfer, baseline):
    assert verdict(low, high) == claim
    assert verdict(low, high, words=TRANSFER_VERDICTS) == transfer
    assert verdict(low, high, words=BASELINE_VERDICTS) == baseline


def test_holm_adjusts_a_small_family_by_hand():
    # sorted: 0.01 (x4 = 0.04), 0.02 (x3 = 0.06), 0.03 (x2 = 0.06), 0.04 (x1, but never below the last: 0.06)
    assert holm([0.03, 0.01, 0.04, 0.02]) == pytest.approx([0.06, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    adjusted = holm([0.01, math.nan, 0.04])  # NaN is not in the family of two
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)


def test_paired_p_by_hand_and_its_degenerate_cases():
    # [2, 5, 2]: mean 3, se 1, t = 3 with 2 df: two-sided p = 0.0955
    assert paired_p([2.0, 5.0, 2.0]) == pytest.approx(0.09547, abs=1e-4)
    assert paired_p([2.0, 5.0, 2.0], by=3.0) == pytest.approx(1.0)
    assert math.isnan(paired_p([4.0]))
    # no spread: the exact sign test, all n on one side (2 * 0.5^n two-sided, 0.5^n one-sided), or none (1)
    assert paired_p([3.0, 3.0]) == 0.5 and paired_p([0.0, 0.0]) == 1.0
    assert paired_p([3.0] * 4) == 0.125 and paired_p([3.0] * 4, alternative="greater") == 0.0625
    assert paired_p([3.0] * 4, alternative="less") == 1.0
    assert paired_p([3.0, 3.0]) > paired_p([2.0, 3.0])  # a tie is no stronger evidence than seeds a point apart
    assert paired_p([3 - 2.7] * 6, by=0.3) == 1.0  # on `by` up to float noise: no side at all, whatever n


def test_differences_equal_up_to_float_noise_have_no_spread_and_raise_no_warning():
    # two accuracies on 360 images, differenced in different orders: equal points, unequal floats
    a, b = 95.0 - 83.05555555555556, 100 * (43 / 360)
    assert a != b
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's "precision loss ... catastrophic cancellation" would raise
        assert paired_p([a, b]) == 0.5
        assert paired_p([a, b], by=a) == 1.0


def test_score_intervals_stay_inside_0_and_100():
    mean, low, high = t_interval([99.0, 100.0, 93.0], bounds=(0.0, 100.0))
    assert high == 100.0 and low < mean < high
    assert t_interval([1.0, 0.0, 9.0], bounds=(0.0, 100.0))[1] == 0.0
    cells = add_scores(pd.DataFrame([cell("a", 1e-3, s, 90.0, v) for s, v in enumerate([99.0, 100.0, 93.0])]))
    row = select_lr(cells, ["layer", "depth"]).iloc[0]
    assert row["high"] == 100.0


def test_selection_never_reads_the_report_seeds():
    # selection seeds choose 1e-3; report cells at 3e-3 with a poisoned val of 100 (and at 1e-3 a val of 0) must move
    # nothing: the lr stays, and the score comes from the report seeds at the chosen lr only
    select = [cell("a", 1e-3, 0, 80.0, 75.0), cell("a", 1e-3, 1, 82.0, 77.0),
              cell("a", 3e-3, 0, 70.0, 99.0), cell("a", 3e-3, 1, 72.0, 99.0)]
    report = [cell("a", 1e-3, 100, 0.0, 60.0), cell("a", 1e-3, 101, 0.0, 62.0),
              cell("a", 3e-3, 102, 100.0, 100.0)]  # a stray report cell at an lr selection did not choose
    rows = [{**c, "role": "select"} for c in select] + [{**c, "role": "report"} for c in report]
    cells = add_scores(pd.DataFrame(rows))
    row = select_lr(cells, ["layer", "depth"]).iloc[0]
    assert row["lr"] == 1e-3 and row["select_mean"] == 81.0   # the selection seeds' val, not the report seeds'
    assert row["mean"] == 61.0 and row["n"] == 2 and row["seeds"] == "report"
    assert sorted(selected_cells(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"])["seed"]) == [100, 101]
    assert chosen_lrs(cells, ["layer"])["lr"].tolist() == [1e-3]
    without = add_scores(pd.DataFrame([{**c, "role": "select"} for c in select]))
    assert select_lr(without, ["layer", "depth"]).iloc[0]["seeds"] == "select"


def test_a_row_whose_lr_moved_after_its_report_cells_is_scored_by_its_selection_seeds_at_the_new_lr():
    # 2 selection seeds chose 1e-3 and its report seeds trained there; 2 more selection seeds moved the choice to
    # 3e-3, whose report cells have not trained: the score is the selection seeds' at 3e-3, never the old report's
    select = [cell("a", 1e-3, s, 80.0, 80.0) for s in (0, 1)] + [cell("a", 1e-3, s, 60.0, 60.0) for s in (2, 3)]
    select += [cell("a", 3e-3, s, 75.0, 74.0) for s in range(4)]
    old_report = [cell("a", 1e-3, s, 90.0, 91.0) for s in (100, 101)]
    rows = [{**c, "role": "select"} for c in select] + [{**c, "role": "report"} for c in old_report]
    cells = add_scores(pd.DataFrame(rows))
    selected = select_lr(cells, ["layer", "depth"])
    row = selected.iloc[0]
    assert row["lr"] == 3e-3 and row["n"] == 4 and row["seeds"] == "select" and row["mean"] == 74.0
    assert sorted(selected_cells(cells, selected, ["layer", "depth"])["seed"]) == [0, 1, 2, 3]


def test_a_row_with_report_seeds_pairs_with_a_row_without_them_on_the_selection_seeds_both_have():
    # mid-sweep: "a" has its report seeds, its baseline "b" not yet. Report seed against selection seed is no pair;
    # the selection seeds (0, 1) both rows trained at their chosen lrs pair instead: a - b = (80 - 70, 84 - 72)
    select = [cell("a", 1e-3, 0, 80.0, 80.0), cell("a", 1e-3, 1, 84.0, 84.0),
              cell("b", 1e-3, 0, 70.0, 70.0), cell("b", 1e-3, 1, 72.0, 72.0)]
    report = [cell("a", 1e-3, s, 99.0, 99.0) for s in (100, 101)]
    rows = [{**c, "role": "select"} for c in select] + [{**c, "role": "report"} for c in report]
    cells = add_scores(pd.DataFrame(rows))
    keys = ["layer", "depth"]
    diff = versus_baseline(cells, select_lr(cells, keys), keys, "b").iloc[0]
    assert diff["n"] == 2 and diff["mean"] == 11.0
    both = add_scores(pd.DataFrame(rows + [{**cell("b", 1e-3, s, 90.0, 90.0), "role": "report"} for s in (100, 101)]))
    diff = versus_baseline(both, select_lr(both, keys), keys, "b").iloc[0]
    assert diff["n"] == 2 and diff["mean"] == 9.0  # once both have report seeds, those pair: 99 - 90


def test_lr_sensitivity_counts_a_failure_at_chance_over_the_common_lrs():
    rows = [cell("a", 1e-3, 0, 80.0, 80.0), cell("a", 3e-3, 0, 70.0, 70.0), cell("a", 1e-2, 0, 0, 0, "diverged"),
            cell("b", 1e-3, 0, 60.0, 60.0), cell("b", 3e-3, 0, 60.0, 60.0), cell("b", 3e-4, 0, 10.0, 10.0)]
    cells = add_scores(pd.DataFrame([{**r, "num_classes": 10} for r in rows]))
    table = lr_sensitivity(cells, ["layer", "depth"], ["depth"]).set_index("layer")
    # common lrs of the depth: 1e-3 and 3e-3. a: best 80, losses 0 and 10 -> 5; b: 0 and 0 -> 0
    assert table.loc["a", "sensitivity"] == pytest.approx(5.0) and table.loc["b", "sensitivity"] == 0.0
    assert table.loc["a", "common_lrs"] == 2 and table.loc["a", "failed"] == 1 and table.loc["a", "cells"] == 3
    alone = add_scores(pd.DataFrame([{**r, "num_classes": 10} for r in rows[:3]]))
    # alone, a's lrs are all common: the diverged 1e-2 counts at chance (10), not 0: (0 + 10 + 70) / 3
    assert lr_sensitivity(alone, ["layer", "depth"], ["depth"])["sensitivity"].iloc[0] == pytest.approx(80 / 3)


def test_rows_sharing_one_lr_have_no_lr_sensitivity_rather_than_zero():
    """Rows on grids of their own (`lr_by_layer`) may share one lr: a row's best over one lr is that lr, so the
    difference would read 0.00 for every row, steady or not."""
    rows = [cell("a", 1e-3, 0, 60.0, 60.0), cell("a", 3e-3, 0, 80.0, 80.0), cell("a", 9e-3, 0, 40.0, 40.0),
            cell("b", 9e-3, 0, 30.0, 30.0), cell("b", 2.7e-2, 0, 85.0, 85.0)]
    table = lr_sensitivity(add_scores(pd.DataFrame(rows)), ["layer", "depth"], ["depth"]).set_index("layer")
    assert table["common_lrs"].tolist() == [1, 1]
    assert table["sensitivity"].isna().all()


def test_the_top_row_is_separated_only_when_the_holm_adjusted_p_says_so():
    clear = paired_cells([10.0, 11.0, 12.0])   # learnable_scaler 81 vs 70: t = 19, p = 0.003
    noisy = paired_cells([1.0, -1.0, 2.0])
    for cells, expected in ((clear, True), (noisy, False)):
        selected = select_lr(cells, ["layer", "depth"])
        table = separation(cells, selected, ["layer", "depth"], ["depth"])
        assert table["top"].tolist() == ["learnable_scaler"] and table["separated"].tolist() == [expected]


def sensitivity_cells(steady: dict[int, tuple[float, float]], shaky: dict[int, tuple[float, float]]) -> pd.DataFrame:
    """Per seed, test top-1 at lr 1e-3 and 3e-3 of a steady and a shaky layer (val 50 everywhere), plus one cell of
    steady at 1e-2, an lr shaky never tried: it counts in neither row's sensitivity."""
    rows = [cell(name, lr, seed, 50.0, score) for name, table in (("steady", steady), ("shaky", shaky))
            for seed, scores in table.items() for lr, score in zip((1e-3, 3e-3), scores, strict=True)]
    rows.append(cell("steady", 1e-2, 0, 50.0, 0.0))
    return add_scores(pd.DataFrame(rows))


def sensitivity(cells: pd.DataFrame, layer: str, rival: str) -> dict[str, float]:
    return sensitivity_difference(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], {"depth": 12},
                                  layer, rival)


def test_the_sensitivity_difference_is_the_columns_difference_paired_per_seed():
    # seed means: steady (90, 75), best 1e-3, sensitivity 7.5; shaky (75, 70), best 1e-3, sensitivity 2.5. Per seed,
    # the gaps to the seed-mean best lr: steady 5 and 10, shaky 20 and -15 (seed 1 does better away from it)
    cells = sensitivity_cells({0: (90.0, 80.0), 1: (90.0, 70.0)}, {0: (90.0, 50.0), 1: (60.0, 90.0)})
    diff = sensitivity(cells, "steady", "shaky")
    assert diff["n"] == 2 and diff["mean"] == pytest.approx(-5.0)  # (15 - 25) / 2: shaky is the steadier row here
    column = lr_sensitivity(cells[cells["lr"] < 1e-2], ["layer", "depth"], ["depth"]).set_index("layer")
    assert diff["mean"] == pytest.approx(column.loc["shaky", "sensitivity"] - column.loc["steady", "sensitivity"])
    assert (diff["low"], diff["high"]) == (-100.0, 100.0)  # -5 +- 12.7062 * 20, clipped to a difference's range


def test_a_seed_missing_an_lr_is_left_out_and_a_diverged_cell_counts_at_chance():
    cells = sensitivity_cells({0: (90.0, 80.0), 1: (90.0, 70.0)}, {0: (90.0, 50.0), 1: (60.0, 90.0)})
    cells = cells[~((cells["layer"] == "shaky") & (cells["seed"] == 1) & (cells["lr"] == 3e-3))]
    diff = sensitivity(cells, "steady", "shaky")
    assert diff["n"] == 1 and diff["mean"] == pytest.approx(15.0)  # seed 0 only: 20 - 5
    diverged = sensitivity_cells({0: (90.0, 80.0)}, {0: (90.0, 0.0)}).assign(num_classes=10)
    diverged.loc[(diverged["layer"] == "shaky") & (diverged["lr"] == 3e-3), "status"] = "diverged"
    assert sensitivity(add_scores(diverged), "steady", "shaky")["mean"] == pytest.approx((90.0 - 10.0) / 2 - 5.0)


def test_rows_sharing_one_lr_give_no_pairs_for_a_steadier_claim():
    cells = sensitivity_cells({0: (90.0, 80.0), 1: (90.0, 70.0)}, {0: (90.0, 50.0), 1: (60.0, 90.0)})
    one = cells[~((cells["layer"] == "shaky") & (cells["lr"] == 3e-3))]  # shared: 1e-3 alone
    assert sensitivity(one, "steady", "shaky")["n"] == 0
    assert sensitivity(cells, "steady", "shaky")["n"] == 2


def test_a_row_that_learnt_nothing_is_never_the_steady_one():
    cells = sensitivity_cells({s: (90.0, 80.0) for s in range(3)}, {s: (0.0, 0.0) for s in range(3)})
    cells = cells.assign(num_classes=10)
    cells.loc[cells["layer"] == "shaky", "status"] = "diverged"  # at chance at every lr: sensitivity 0, but no signal
    assert sensitivity(add_scores(cells), "shaky", "steady")["n"] == 0


@pytest.mark.parametrize(("n", "expected"), [(33, 0.5029), (34, 0.4950)])
def test_the_detectable_effect_meets_the_textbook_sample_size(n, expected):
    # Cohen's table (and G*Power): a paired t test needs 34 pairs to detect dz = 0.5 at two-sided 0.05 with 80% power;
    # 33 pairs fall short. The exact MDE at 33 pairs lies above 0.5 sd, at 34 below it
    assert detectable_effect(n, 2.0, 0.05) == pytest.approx(2 * expected, abs=2e-4)
    # many pairs: the normal limit (z_0.975 + z_0.8) sd / sqrt(n) = 2.8016 sd / sqrt(n)
    assert detectable_effect(2000, 1.0, 0.05) == pytest.approx(2.8016 / math.sqrt(2000), rel=2e-3)


@pytest.mark.parametrize(("n", "sd", "alpha"), [(2, 3.0, 0.05), (4, 5.0, 0.01), (4, 1.0, 0.005)])
def test_the_detectable_effect_is_detected_at_80_percent_power_by_simulation(n, sd, alpha):
    """Brute force: draw n paired differences from N(MDE, sd) many times and run scipy's own t test; it rejects
    80% of the time (±1.1 points: three binomial standard errors at 16,000 draws). Below the MDE it rejects less."""
    import numpy as np
    from scipy import stats

    mde = detectable_effect(n, sd, alpha)
    rng = np.random.default_rng(0)

    def rejected(shift: float) -> float:
        draws = rng.normal(shift, sd, size=(16_000, n))
        return float((stats.ttest_1samp(draws, 0.0, axis=1).pvalue < alpha).mean())

    assert rejected(mde) == pytest.approx(POWER, abs=0.011)
    assert rejected(0.8 * mde) < POWER - 0.03
    if n == 2:  # 1 degree of freedom: the textbook shortcut (t_0.975 + t_0.8) sd / sqrt(n) is 14% short of it
        shortcut = (stats.t.ppf(1 - alpha / 2, 1) + stats.t.ppf(POWER, 1)) * sd / math.sqrt(2)
        assert shortcut < 0.9 * mde and rejected(shortcut) < POWER - 0.02


def test_no_detectable_effect_without_two_pairs_or_without_spread():
    assert math.isnan(detectable_effect(1, 2.0, 0.05)) and math.isnan(detectable_effect(0, math.nan, 0.05))
    assert math.isnan(detectable_effect(4, 0.0, 0.05))  # equal differences: the sign test, whatever their size
    assert detectable_effect(4, 2.0, 0.05) == pytest.approx(2 * detectable_effect(4, 1.0, 0.05))  # scales with sd
    assert detectable_effect(4, 1.0, 0.005) > detectable_effect(4, 1.0, 0.05)  # a stricter level needs more


def test_holm_levels_follow_each_p_values_rank():
    # ranks by p: 0.001 first (0.05 / 3), 0.02 second (0.05 / 2), 0.04 last (0.05); NaN is no part of the family
    assert holm_levels([0.04, 0.001, math.nan, 0.02]) == pytest.approx([0.05, 0.05 / 3, math.nan, 0.025],
                                                                       nan_ok=True)


def test_a_seed_whose_two_cells_trained_on_different_devices_is_no_pair():
    cells = paired_cells([2.0, 5.0, 2.0, 8.0]).assign(device="CPU (x86_64, 2 cores)")
    cells.loc[(cells["layer"] == "layernorm") & (cells["seed"] == 3), "device"] = "NVIDIA H200"
    selected = select_lr(cells, ["layer", "depth"])
    row = versus_baseline(cells, selected, ["layer", "depth"], "layernorm").iloc[0]
    assert (row["n"], row["mean"], row["cross_device"]) == (3, 3.0, 1)  # seed 3 (+8) left out
    from normbench.report.tables import paired_text

    assert paired_text(row) == "3 (1 left out: CPU vs GPU)"
