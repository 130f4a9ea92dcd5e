"""Blow-ups that stay finite: cells whose val top-1 ended far below their own best without diverging.

The `failed` column counts diverged cells: a non-finite train loss or one above `max_loss` (10 x chance's). A cell
can also blow up and stay finite: its loss climbs back above chance's, its val falls, it may recover and fall again,
and at the final epoch it scores far under what it had reached. That is the instability a reader of "how often does
it blow up" asks about, so the leaderboard lists every cell that ended more than FALL_POINTS under its own best,
with the epochs where its loss climbed back above chance's ("never" tells a slow slide from a blow-up), instead of
redefining the failed column the published tables use.
"""

from __future__ import annotations

import math

import pandas as pd

from normbench.report.analysis import Analysis
from normbench.report.style import lr_text
from normbench.report.tables import markdown_table

FALL_POINTS = 10.0  # val top-1 points between a cell's best epoch and its final one that make it a blow-up


def finite_blowups(cells: pd.DataFrame, history: pd.DataFrame, num_classes: int | None) -> pd.DataFrame:
    """The cells (status ok) whose final val top-1 lies more than FALL_POINTS under their best, the largest fall
    first, with `climbs`: the epochs (0-based) where the train loss went back above chance's ln(num_classes) after
    first falling below it, or None where that cannot be told (no class count, no recorded curve)."""
    ok = cells[cells["status"] == "ok"]
    fell = ok[(ok["best_val_top1"] - ok["final_val_top1"]) > FALL_POINTS].copy()
    if fell.empty:
        return fell
    fell["climbs"] = [climbs_above(history[history["cell_id"] == cell_id] if len(history) else history, num_classes)
                      for cell_id in fell["cell_id"]]
    fell["_fall"] = fell["best_val_top1"] - fell["final_val_top1"]
    order = ["_fall", "depth", "layer", "lr", "seed", "cell_id"]
    return fell.sort_values(order, ascending=[False, *[True] * (len(order) - 1)], kind="stable").drop(columns="_fall")


def climbs_above(curve: pd.DataFrame, num_classes: int | None) -> list[int] | None:
    """The epochs where a cell's train loss climbed back above chance's after first falling below it: one per
    climb, however many epochs it stays up (the start, above chance before any learning, is not a climb)."""
    if not num_classes or curve.empty or "train_loss" not in curve:
        return None
    chance, below, climbs = math.log(num_classes), False, []
    for epoch, loss in zip(curve["epoch"], curve["train_loss"], strict=True):
        if math.isfinite(loss) and loss < chance:
            below = True
        elif below:
            climbs.append(int(epoch))
            below = False
    return climbs


def blowup_section(analysis: Analysis) -> list[str]:
    """'## blow-ups that did not diverge': one row per cell of `finite_blowups`; [] when there are none."""
    classes = analysis.regime.num_classes
    fell = finite_blowups(analysis.all_cells, analysis.history, classes)
    if fell.empty:
        return []
    chance = f"chance's ln {classes} = {math.log(classes):.2f}" if classes else "chance's"
    rows = [_row(cell, f"loss back above {chance} at epoch") for cell in fell.to_dict("records")]
    return [f"## blow-ups that did not diverge (cells whose final val top-1 lies more than {FALL_POINTS:g} points "
            "under their own best; `failed` counts only non-finite or runaway losses, so these are not in it; epochs "
            "counted from 0, as history.csv does)", "",
            markdown_table(pd.DataFrame(rows)), ""]


def _row(cell: dict, climbs_column: str) -> dict:
    best_epoch = cell.get("best_val_epoch")
    known = best_epoch is not None and pd.notna(best_epoch) and best_epoch >= 0  # -1: no epoch had a finite val
    epochs = cell.get("epochs_run")
    return {"depth": int(cell["depth"]), "layer": cell["layer"], "lr": lr_text(cell["lr"]), "seed": int(cell["seed"]),
            "role": cell["role"] if isinstance(cell.get("role"), str) else "?",
            "epochs": int(epochs) if epochs is not None and pd.notna(epochs) else "?",
            "best val (%)": f"{cell['best_val_top1']:.2f}" + (f" (epoch {int(best_epoch)})" if known else ""),
            "final val (%)": f"{cell['final_val_top1']:.2f}",
            climbs_column: "?" if cell["climbs"] is None else ", ".join(map(str, cell["climbs"])) or "never"}
