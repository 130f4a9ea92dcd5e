"""normbench.report.stats against hand-computed values (t quantiles from tables: t(0.975, 1) = 12.7062,
t(0.975, 2) = 4.3027, t(0.975, 3) = 3.1824)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from normbench.report.stats import check_claims, edge, select_lr, t_interval, verdict, versus_baseline
from normbench.report.tables import BASELINE_VERDICTS
from normbench.report.transfer import TRANSFER_VERDICTS
from normbench.spec.selection import add_scores


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


@pytest.mark.parametrize(("diffs", "by", "expected"), [
    ([5.0, 6.0, 7.0], 3.4, "supported"),       # 6 ± 2.4841: [3.516, 8.484] lies above 3.4
    ([5.0, 6.0, 7.0], 4.0, "inconclusive"),    # ... but not above 4
    ([-5.0, -6.0, -7.0], 0.0, "contradicted"),
    ([2.0, 5.0, 2.0], 0.0, "inconclusive"),
    ([9.0], 0.0, "inconclusive"),              # one seed: no interval, no verdict
])
def test_claims_verdicts(diffs, by, expected):
    cells = paired_cells(diffs)
    claims = [{"layer": "learnable_scaler", "beats": "layernorm", "depth": 36, "by": by}]
    table = check_claims(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], claims)
    assert table["verdict"].tolist() == [expected] and table["n"].tolist() == [len(diffs)]
    assert verdict(1.0, 2.0) == "supported" and verdict(-2.0, -1.0) == "contradicted"


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
