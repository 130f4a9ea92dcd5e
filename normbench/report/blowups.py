"""Blow-ups that stay finite: cells whose val top-1 ended far below their own best without diverging.

The `failed` column counts diverged cells: a non-finite train loss or one above `max_loss` (10 x chance's). A cell
can also blow up and stay finite: its loss jumps back above chance's, its val falls, it may recover and fall again,
and at the final epoch it scores far under what it had reached. That is the instability a reader of "how often does
it blow up" asks about, so the leaderboard lists such cells apart, with the epochs where their loss went back above
chance's, instead of redefining the failed column the published tables use.
"""

from __future__ import annotations

import math

import pandas as pd

from normbench.report.analysis import Analysis
from normbench.report.style import lr_text
from normbench.report.tables import markdown_table

FALL_POINTS = 10.0  # val top-1 points between a cell's best epoch and its final one that make it a blow-up


def fell_back(cells: pd.DataFrame, history: pd.DataFrame, num_classes: int | None) -> pd.DataFrame:
    """The cells (status ok) whose final val top-1 lies more than FALL_POINTS under their best, best first by the
    size of the fall, with `best_epoch` and `spikes`: the epochs (0-based) where the train loss went back above
    chance's ln(num_classes) after first falling below it (empty without the class count or the history)."""
    ok = cells[cells["status"] == "ok"]
    fell = ok[(ok["best_val_top1"] - ok["final_val_top1"]) > FALL_POINTS].copy()
    if fell.empty:
        return fell
    chance = math.log(num_classes) if num_classes else math.inf
    spikes, best_epochs = [], []
    for cell_id in fell["cell_id"]:
        curve = history[history["cell_id"] == cell_id].sort_values("epoch") if len(history) else history
        below = False
        above: list[int] = []
        for epoch, loss in zip(curve.get("epoch", []), curve.get("train_loss", []), strict=True):
            if loss < chance:
                below = True
            elif below:
                above.append(int(epoch))
                below = False  # one spike per climb back above chance, however many epochs it stays there
        spikes.append(above)
        best_epochs.append(int(curve.loc[curve["val_top1"].idxmax(), "epoch"]) if len(curve) else None)
    fell["spikes"], fell["best_epoch"] = spikes, best_epochs
    return fell.assign(_fall=fell["best_val_top1"] - fell["final_val_top1"]).sort_values(
        "_fall", ascending=False).drop(columns="_fall")


def blowup_section(analysis: Analysis) -> list[str]:
    """'## blow-ups that did not diverge': one row per cell of `fell_back`; [] when there are none."""
    classes = analysis.regime.num_classes
    fell = fell_back(analysis.all_cells, analysis.history, classes)
    if fell.empty:
        return []
    chance = f"chance's ln {classes} = {math.log(classes):.2f}" if classes else "chance's"
    rows = [{"depth": int(c["depth"]), "layer": c["layer"], "lr": lr_text(c["lr"]), "seed": int(c["seed"]),
             "epochs": int(c["epochs_run"]) if pd.notna(c.get("epochs_run")) else "?",
             "best val (%)": f"{c['best_val_top1']:.2f}" + (f" (epoch {c['best_epoch']})"
                                                           if c["best_epoch"] is not None else ""),
             "final val (%)": f"{c['final_val_top1']:.2f}",
             f"loss back above {chance} at epoch": ", ".join(map(str, c["spikes"])) or "—"}
            for c in fell.to_dict("records")]
    return [f"## blow-ups that did not diverge (cells whose final val top-1 lies more than {FALL_POINTS:g} points "
            "under their own best; `failed` counts only non-finite or runaway losses, so these are not in it; epochs "
            "counted from 0, as history.csv does)", "",
            markdown_table(pd.DataFrame(rows)), ""]
