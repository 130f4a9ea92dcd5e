"""normbench.report.convergence: the label-smoothing loss floor by hand, the val-still-rising test, row verdicts."""

from __future__ import annotations

import math

import pytest

from normbench.report.convergence import loss_floor, loss_threshold, row_convergence, val_gain


def test_the_loss_floor_of_ten_classes_at_smoothing_0_1():
    # targets: 0.9 + 0.1 / 10 = 0.91 on the true class, 0.01 on each of the other nine; floor = their entropy
    by_hand = -(0.91 * math.log(0.91) + 9 * 0.01 * math.log(0.01))
    assert loss_floor(10, 0.1) == pytest.approx(by_hand) == pytest.approx(0.50029, abs=1e-5)
    assert loss_floor(10, 0.0) == 0.0
    assert loss_threshold(10, 0.1) == pytest.approx(by_hand + 0.1 * (math.log(10) - by_hand))
    with pytest.raises(ValueError):
        loss_floor(1, 0.1)


def test_val_gain_over_the_last_fifth_of_the_epochs():
    assert val_gain([10, 20, 30, 40, 50, 60, 70, 80, 90, 95]) == pytest.approx(5.0)  # last 2 epochs: 90 -> 95
    assert val_gain([50.0] * 10) == pytest.approx(0.0)
    # 20 epochs: the last 4 rise by 1 each: slope 1 over 3 steps
    assert val_gain([80.0] * 16 + [81.0, 82.0, 83.0, 84.0]) == pytest.approx(3.0)
    assert math.isnan(val_gain([50.0]))


def test_row_convergence_names_what_failed():
    flat = [50.0] * 10
    assert row_convergence([0.55, 0.60], [flat, flat], 0.68).converged
    high = row_convergence([0.79, 0.81], [flat, flat], 0.68)
    assert not high.converged and high.reason == "loss 0.80 > 0.68"
    rising = row_convergence([0.55], [[10, 20, 30, 40, 50, 60, 70, 80, 90, 95]], 0.68)
    assert not rising.converged and rising.reason == "val +5.0 over the last 2 epochs"
    assert row_convergence([0.9], [flat], None).converged  # mixup: no floor, only val is checked
    assert row_convergence([], [], 0.68).reason == "every seed diverged"


def test_the_2x_check_flips_the_verdict_to_still_improving_past_the_threshold():
    import pandas as pd

    from normbench.report.convergence import BUDGET_POINTS, budget_rows
    from normbench.report.tables import converged_text

    once = pd.DataFrame({"layer": ["ln"] * 4, "depth": [36] * 4, "lr": [1e-3] * 4, "seed": [100, 101, 102, 103],
                         "select": [80.0, 82.0, 50.0, 50.0]})  # seeds 102/103 are not in the check: ignored

    def check(gain: float) -> pd.Series:
        twice = pd.DataFrame({"layer": ["ln"] * 2, "depth": [36] * 2, "lr": [1e-3] * 2, "seed": [100, 101],
                              "select": [80.0 + gain, 82.0 + gain]})
        [row] = budget_rows(once, twice, ["layer", "depth"], value="select").to_dict("records")
        return pd.Series(row)

    small, large, worse = check(BUDGET_POINTS / 2), check(BUDGET_POINTS * 3), check(-2 * BUDGET_POINTS)
    assert (small["val_1x"], small["seeds"]) == (81.0, 2)  # paired on the checked seeds only
    assert small["converged"] and converged_text(small) == "yes (2x: +0.5)"
    assert not large["converged"] and converged_text(large) == "still improving (+3.0 at 2x)"
    assert not worse["converged"] and converged_text(worse) == "worse at 2x (-2.0)"


def test_the_2x_check_reads_only_the_2x_cells_at_the_lr_selected_now():
    """A row whose selected lr moved after its 2x cells trained (more selection seeds, a later bracketing round) has
    2x cells at the old lr: they check nothing. Until its new lr's 2x cells train, the row has no 2x verdict."""
    import pandas as pd

    from normbench.report.convergence import budget_rows

    once = pd.DataFrame({"layer": ["nf"] * 2, "depth": [36] * 2, "lr": [1e-4] * 2, "seed": [100, 101],
                         "select": [54.0, 56.0]})
    old = pd.DataFrame({"layer": ["nf"] * 2, "depth": [36] * 2, "lr": [3.16e-3] * 2, "seed": [100, 101],
                        "select": [10.0, 10.0]})
    assert budget_rows(once, old, ["layer", "depth"], value="select").empty
    new = old.assign(lr=1e-4, select=[55.0, 57.0])
    [row] = budget_rows(once, pd.concat([old, new]), ["layer", "depth"], value="select").to_dict("records")
    assert (row["val_1x"], row["val_2x"], row["seeds"]) == (55.0, 56.0, 2)


def test_a_rule_verdict_without_the_2x_check_says_it_is_unconfirmed():
    """At 640 steps the final-loss rule called 32 rows converged that the 2x check found still improving: its yes
    must not read like the check's."""
    import pandas as pd

    from normbench.report.tables import converged_text

    assert converged_text(pd.Series({"converged": True, "reason": ""})) == (
        "yes by the final-loss rule (unconfirmed: no 2x check)")
    assert converged_text(pd.Series({"converged": False, "reason": "loss 0.81 > 0.68"})) == "no (loss 0.81 > 0.68)"


def test_the_2x_check_pairs_a_seeds_1x_and_2x_cells_only_on_one_device_class():
    """The wide folder's 2x cells trained on a lent H200 and its 1x report cells on this CPU: a change between them
    is the device's as much as the budget's, so the check compares nothing there, and says why."""
    import pandas as pd

    from normbench.report.convergence import budget_rows
    from normbench.report.tables import budget_check_table, converged_text

    cpu, gpu = "CPU (x86_64, 2 cores)", "NVIDIA H200"
    once = pd.DataFrame({"layer": ["ln"] * 2, "depth": [36] * 2, "lr": [1e-3] * 2, "seed": [100, 101],
                         "select": [80.0, 82.0], "device": [cpu, cpu]})
    twice = once.assign(select=[90.0, 92.0], device=[gpu, gpu])
    [row] = budget_rows(once, twice, ["layer", "depth"], value="select").to_dict("records")
    assert row["seeds"] == 0 and row["converged"] != row["converged"]  # NaN: not checked
    assert row["reason"] == "not comparable: 2x on GPU, 1x on CPU"
    assert converged_text(pd.Series(row)) == row["reason"]
    assert budget_check_table(pd.DataFrame([row]), ["layer"], ["depth"])["val 2x"].tolist() == ["—"]
    mixed = twice.assign(device=[cpu, gpu])  # one seed's pair on one device: it alone is compared
    [row] = budget_rows(once, mixed, ["layer", "depth"], value="select").to_dict("records")
    assert (row["seeds"], row["val_1x"], row["val_2x"]) == (1, 80.0, 90.0)
