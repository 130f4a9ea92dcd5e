"""Learning speed: how many optimizer steps a cell needs before its val top-1 first reaches each target.

AlgoPerf scores time-to-target and DeepOBS reports speed beside final accuracy: "gets going fast" and "ends up
good" are two answers, and a ~160-step budget only sees the first. A cell that never reaches a target (or
diverged first) has no step count: missing, and ranked as infinitely slow. Pure functions on cell and history
frames (report/frames.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

NEVER = math.inf  # a target never reached: slower than any count


def target_column(target: float) -> str:
    """results.csv's column of a target: `steps_to_50` for 50 %."""
    return f"steps_to_{target:g}"


def steps_to_target(history: Iterable[Mapping[str, float]], target: float) -> float:
    """The optimizer steps at the end of the first epoch whose val top-1 is at least `target` (%); NaN if none."""
    for record in history:
        value = record.get("val_top1")
        if value is not None and math.isfinite(value) and value >= target:
            return float(record["step"])
    return math.nan


def add_steps_to_targets(cells: pd.DataFrame, history: pd.DataFrame, targets: Iterable[float]) -> pd.DataFrame:
    """`cells` plus a `steps_to_<target>` column per target, from each cell's epochs in `history`."""
    cells = cells.copy()
    by_cell = {cid: group.sort_values("epoch").to_dict("records") for cid, group in history.groupby("cell_id")}
    for target in targets:
        cells[target_column(target)] = [steps_to_target(by_cell.get(cid, []), target) for cid in cells["cell_id"]]
    return cells


def median_steps(steps: Iterable[float]) -> float:
    """The median over seeds with a missing count taken as NEVER (so it is NEVER when half the seeds or more never
    reached the target); NaN without seeds."""
    values = [NEVER if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in steps]
    return float(np.median(values)) if values else math.nan


def speed_rows(at_selected: pd.DataFrame, keys: list[str], targets: Iterable[float]) -> pd.DataFrame:
    """Per row of `keys` (the cells at each row's selected lr, the seeds that report): per target, the median steps
    over seeds (`median_<t>`) and how many seeds reached it (`reached_<t>`), with `n` seeds."""
    rows = []
    for key, group in at_selected.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, object] = {**dict(zip(keys, key, strict=True)), "n": len(group)}
        for target in targets:
            column = group[target_column(target)]
            row[f"median_{target:g}"] = median_steps(column)
            row[f"reached_{target:g}"] = int(column.notna().sum())
        rows.append(row)
    return pd.DataFrame(rows)
