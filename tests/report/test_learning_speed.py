"""normbench.report.learning_speed: steps to a val target on a handcrafted history; never reached = slowest."""

from __future__ import annotations

import math

import pandas as pd

from normbench.report.learning_speed import NEVER, add_steps_to_targets, median_steps, speed_rows, steps_to_target

HISTORY = [{"epoch": 0, "step": 16, "val_top1": 12.0}, {"epoch": 1, "step": 32, "val_top1": 55.0},
           {"epoch": 2, "step": 48, "val_top1": 49.0}, {"epoch": 3, "step": 64, "val_top1": 71.5},
           {"epoch": 4, "step": 80, "val_top1": float("nan")}]


def test_steps_to_target_is_the_first_epoch_at_or_above_it():
    assert steps_to_target(HISTORY, 50) == 32        # epoch 1 reaches it; the dip at epoch 2 does not matter
    assert steps_to_target(HISTORY, 55) == 32        # "at least": equal counts
    assert steps_to_target(HISTORY, 70) == 64
    assert math.isnan(steps_to_target(HISTORY, 90))  # never reached: missing, not the budget
    assert math.isnan(steps_to_target([], 50))


def test_a_median_counts_a_missing_seed_as_infinitely_slow():
    assert median_steps([32.0, 64.0, 48.0]) == 48.0
    assert median_steps([32.0, math.nan, 48.0]) == 48.0
    assert median_steps([32.0, math.nan, math.nan]) == NEVER  # most seeds never got there


def test_speed_rows_per_layer_from_the_history_frame():
    history = pd.DataFrame([{"cell_id": cid, **h} for cid in ("a", "b") for h in HISTORY])
    history.loc[(history["cell_id"] == "b") & (history["epoch"] == 3), "val_top1"] = 60.0  # b never reaches 70
    cells = pd.DataFrame({"cell_id": ["a", "b"], "layer": ["x", "x"], "depth": [12, 12]})
    cells = add_steps_to_targets(cells, history, [50, 70])
    assert cells["steps_to_50"].tolist() == [32, 32] and cells["steps_to_70"].tolist()[0] == 64
    rows = speed_rows(cells, ["layer", "depth"], [50, 70]).iloc[0]
    assert rows["median_50"] == 32 and rows["reached_50"] == 2
    assert rows["median_70"] == NEVER and rows["reached_70"] == 1 and rows["n"] == 2
