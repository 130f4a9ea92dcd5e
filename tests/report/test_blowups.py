"""Blow-ups that stay finite: a cell that ended far under its own best is listed with the epochs where its loss
climbed back above chance's; a dip that recovered, a diverged cell (the failed column's) and a steady cell are not."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from normbench.report.blowups import FALL_POINTS, blowup_section, fell_back

CHANCE = math.log(10)


def cell(cell_id: str, best: float, final: float, status: str = "ok") -> dict:
    return {"cell_id": cell_id, "depth": 36, "layer": "hc_dynamic", "lr": 0.0031623, "seed": 103, "status": status,
            "best_val_top1": best, "final_val_top1": final, "epochs_run": 6}


def curve(cell_id: str, losses: list[float], vals: list[float]) -> list[dict]:
    return [{"cell_id": cell_id, "epoch": e, "train_loss": loss, "val_top1": val}
            for e, (loss, val) in enumerate(zip(losses, vals, strict=True))]


CELLS = pd.DataFrame([cell("blew", 80.0, 20.0), cell("dipped", 80.0, 80.0 - FALL_POINTS + 0.5),
                      cell("diverged", 80.0, 10.0, status="diverged"), cell("steady", 90.0, 90.0)])
HISTORY = pd.DataFrame([
    # above chance at epoch 0 is the start, not a spike; back above at 2 (staying there at 3) and at 5
    *curve("blew", [2.4, 1.0, 2.5, 2.6, 1.0, CHANCE + 0.1], [12.0, 60.0, 20.0, 15.0, 80.0, 20.0]),
    *curve("dipped", [2.4, 1.0, 0.9, 0.8, 0.7, 0.7], [12.0, 60.0, 80.0, 75.0, 72.0, 70.5]),
])


def test_only_a_finite_cell_that_ended_far_under_its_best_is_listed_with_its_climbs_above_chance():
    fell = fell_back(CELLS, HISTORY, num_classes=10)
    assert fell["cell_id"].tolist() == ["blew"]
    row = fell.iloc[0]
    assert row["spikes"] == [2, 5] and row["best_epoch"] == 4


def test_the_section_names_the_cell_its_fall_and_its_epochs_and_is_absent_without_one():
    analysis = SimpleNamespace(all_cells=CELLS, history=HISTORY, regime=SimpleNamespace(num_classes=10))
    lines = blowup_section(analysis)
    assert lines[0].startswith("## blow-ups that did not diverge")
    table = "\n".join(lines)
    assert "| hc_dynamic " in table and "| 0.00316 " in table and "| 80.00 (epoch 4) " in table
    assert "| 20.00 " in table and "| 2, 5 " in table and "ln 10 = 2.30" in table
    steady = SimpleNamespace(all_cells=CELLS[CELLS["cell_id"] != "blew"], history=HISTORY, regime=analysis.regime)
    assert blowup_section(steady) == []  # the published folders without one keep their leaderboards unchanged
