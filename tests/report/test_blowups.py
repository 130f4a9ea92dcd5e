"""Blow-ups that stay finite: a cell that ended far under its own best is listed, the largest fall first, with the
epochs where its loss climbed back above chance's ("never" for a slow slide, "?" without a curve); a dip that
recovered, a diverged cell (the failed column's) and a steady cell are not."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from normbench.report.blowups import FALL_POINTS, blowup_section, finite_blowups

CHANCE = math.log(10)


def cell(cell_id: str, best: float, final: float, status: str = "ok", best_epoch: int = 4) -> dict:
    return {"cell_id": cell_id, "depth": 36, "layer": cell_id, "lr": 0.0031623, "seed": 103, "role": "report",
            "status": status, "best_val_top1": best, "final_val_top1": final, "best_val_epoch": best_epoch,
            "epochs_run": 6}


def curve(cell_id: str, losses: list[float]) -> list[dict]:
    return [{"cell_id": cell_id, "epoch": e, "train_loss": loss} for e, loss in enumerate(losses)]


CELLS = pd.DataFrame([cell("blew", 80.0, 20.0), cell("dipped", 80.0, 80.0 - FALL_POINTS + 0.5),
                      cell("diverged", 80.0, 10.0, status="diverged"), cell("steady", 90.0, 90.0),
                      cell("slid", 70.0, 55.0, best_epoch=2), cell("uncharted", 60.0, 40.0, best_epoch=-1)])
HISTORY = pd.DataFrame([
    # above chance at epoch 0 is the start, not a climb; back above at 2 (staying there at 3) and at 5
    *curve("blew", [2.4, 1.0, 2.5, 2.6, 1.0, CHANCE + 0.1]),
    *curve("dipped", [2.4, 1.0, 0.9, 0.8, 0.7, 0.7]),
    *curve("slid", [2.4, 1.0, 0.9, 1.2, 1.5, 1.9]),  # val slid 15 points, the loss never back above chance
])


def test_cells_that_ended_far_under_their_best_are_listed_largest_fall_first_with_their_climbs():
    fell = finite_blowups(CELLS, HISTORY, num_classes=10)
    assert fell["cell_id"].tolist() == ["blew", "uncharted", "slid"]  # falls 60, 20, 15
    assert fell["climbs"].tolist() == [[2, 5], None, []]
    assert finite_blowups(CELLS, HISTORY, num_classes=None)["climbs"].tolist() == [None, None, None]


def test_the_section_names_each_cell_its_fall_and_its_epochs_and_is_absent_without_one():
    analysis = SimpleNamespace(all_cells=CELLS, history=HISTORY, regime=SimpleNamespace(num_classes=10))
    lines = blowup_section(analysis)
    assert lines[0].startswith("## blow-ups that did not diverge") and "ln 10 = 2.30" in lines[2]
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in lines[2].splitlines()[2:]}
    assert rows["blew"][5:] == ["6", "80.00 (epoch 4)", "20.00", "2, 5"]
    assert rows["blew"][2:5] == ["0.00316", "103", "report"]
    assert rows["slid"][6:] == ["70.00 (epoch 2)", "55.00", "never"]
    assert rows["uncharted"][6:] == ["60.00", "40.00", "?"]  # no best epoch recorded, no curve: nothing made up
    steady = SimpleNamespace(all_cells=CELLS[CELLS["cell_id"].isin(["dipped", "diverged", "steady"])],
                             history=HISTORY, regime=analysis.regime)
    assert blowup_section(steady) == []  # a folder without one keeps its leaderboard as it was
