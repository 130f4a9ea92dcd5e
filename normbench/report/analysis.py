"""Every number a leaderboard prints, computed once from the cells and their histories (`analyse`); the tables
and the header only format an `Analysis`. Pure: no ledger, no files.

A row is a layer (and any extra matrix axis); a table is a depth, and a budget when `epochs` is a matrix axis.
Per row: the lr the selection seeds chose, the score on the report seeds there, learning speed, convergence,
lr sensitivity and failure rate; per table: whether the top row is separated from the second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from normbench.contracts.bracketing import DEFAULT_LR_BOUNDS, RowBracket, bracket_row
from normbench.contracts.devices import device_class, known_classes
from normbench.contracts.selection import BUDGETS, ROLE, SELECT
from normbench.report.budget import BUDGET_AXIS
from normbench.report.convergence import budget_rows, convergence_rows, loss_floor, loss_threshold
from normbench.report.learning_speed import add_steps_to_targets, speed_rows
from normbench.report.stats import lr_sensitivity, per_lr, select_lr, selected_cells, selecting, separation

MATRIX_AXES = ("depth", "layer", "lr", "seed")
# the lrs a row's bracketing steps from: one grid for every row, or a row's own by its layer (Suite.lr_grid)
LrGrid = Sequence[float] | Callable[[str | None], Sequence[float]] | None
RowLattice = Callable[[str | None], Sequence[float] | None] | None  # a row's lattice by its layer (Suite.lr_lattice)


@dataclass(frozen=True)
class Regime:
    """The training regime of the cells: what a reader must know before reading a number."""

    num_classes: int | None
    smoothing: float | None
    soft_targets: bool                   # mixup or cutmix: no constant loss floor
    floor: float | None
    threshold: float | None              # a converged row's median final train loss stays under this

    @staticmethod
    def of(cells: pd.DataFrame, smoothing: float | None, soft_targets: bool) -> Regime:
        classes = cells["num_classes"].dropna() if "num_classes" in cells else pd.Series(dtype=float)
        classes = classes[classes > 0]
        k = int(classes.iloc[0]) if len(classes) else None
        known = k is not None and smoothing is not None and not soft_targets
        return Regime(k, smoothing, soft_targets, loss_floor(k, smoothing) if known else None,
                      loss_threshold(k, smoothing) if known else None)


@dataclass
class Analysis:
    cells: pd.DataFrame        # every cell, with steps_to_<target> columns
    history: pd.DataFrame      # every cell's epochs (report/frames.py)
    row_keys: list[str]        # layer and any extra matrix axis
    table_keys: list[str]      # depth, and the budget axis when it varies
    targets: list[float]
    regime: Regime
    selected: pd.DataFrame     # select_lr's rows + convergence + sensitivity + failure columns
    speed: pd.DataFrame        # learning_speed.speed_rows per row
    separation: pd.DataFrame   # stats.separation per table
    budget: pd.DataFrame = field(default_factory=pd.DataFrame)  # convergence.budget_rows: the 2x check per row
    budget_cells: pd.DataFrame = field(default_factory=pd.DataFrame)  # the 2x cells themselves (results.csv rows)

    @property
    def all_cells(self) -> pd.DataFrame:
        """Every cell, the 2x check's included: what results.csv holds."""
        return pd.concat([self.cells, self.budget_cells], ignore_index=True) if len(self.budget_cells) else self.cells
    notes: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [*self.row_keys, *self.table_keys]


def table_and_row_keys(cells: pd.DataFrame, matrix_axes: list[str]) -> tuple[list[str], list[str]]:
    """(row keys, table keys): a table per depth (and budget, when `epochs` takes several values); a row per layer
    and any other axis the matrix varies."""
    budget = [BUDGET_AXIS] if BUDGET_AXIS in matrix_axes and cells[BUDGET_AXIS].nunique() > 1 else []
    extra = [a for a in matrix_axes if a not in (*MATRIX_AXES, *budget)]
    return ["layer", *extra], ["depth", *budget]


def analyse(cells: pd.DataFrame, history: pd.DataFrame, *, matrix_axes: list[str], targets: list[float],
            smoothing: float | None, soft_targets: bool, lr_grid: LrGrid = None,
            bracket_max_steps: int | None = None, bracketing: bool | None = None,
            lr_bounds: Sequence[float] = DEFAULT_LR_BOUNDS, lr_lattice: RowLattice = None) -> Analysis:
    """`lr_grid`, `bracketing`, `bracket_max_steps` and `lr_bounds` let the edge column say why bracketing left each
    row where it is (`bracketing` None: on when `bracket_max_steps` is given, as older callers say it)."""
    budget = cells[cells[ROLE] == BUDGETS] if ROLE in cells else cells.iloc[0:0]
    cells = cells[cells[ROLE] != BUDGETS] if ROLE in cells else cells  # 2x cells never choose nor score
    row_keys, table_keys = table_and_row_keys(cells, matrix_axes)
    keys = [*row_keys, *table_keys]
    cells = add_steps_to_targets(cells, history, targets)
    regime = Regime.of(cells, smoothing, soft_targets)
    selected = with_edge_reasons(select_lr(cells, keys), cells, keys, lr_grid, bracket_max_steps,
                                 bracketing=bracketing, lr_bounds=lr_bounds, lr_lattice=lr_lattice)
    at_selected = selected_cells(cells, selected, keys)
    converged = convergence_rows(at_selected, history, keys, regime.threshold)
    checked = budget_rows(at_selected, budget, keys, value=SELECT)
    if not checked.empty:  # the 2x check decides where it ran; the loss/val-slope rule only where it did not
        converged = converged.merge(checked, on=keys, how="left", suffixes=("_rule", ""))
        ran = converged["reason"].notna()  # the check ran: its verdict, or why its cells compare with nothing
        converged["converged"] = converged["converged"].where(ran, converged["converged_rule"])
        converged["reason"] = converged["reason"].where(ran, converged["reason_rule"])
        converged = converged.drop(columns=["converged_rule", "reason_rule"])
    sensitivity = lr_sensitivity(cells, keys, table_keys)
    selected = (selected.merge(converged, on=keys, how="left")
                .merge(sensitivity[[*keys, "sensitivity", "common_lrs"]], on=keys, how="left"))
    if (devices := row_devices(cells, at_selected, keys)) is not None:
        selected = selected.merge(devices, on=keys, how="left")
    return Analysis(cells=cells, history=history, row_keys=row_keys, table_keys=table_keys, targets=targets,
                    regime=regime, selected=selected, speed=speed_rows(at_selected, keys, targets),
                    separation=separation(cells, selected, keys, table_keys), budget=checked,
                    budget_cells=budget)


def row_devices(cells: pd.DataFrame, at_selected: pd.DataFrame, keys: list[str]) -> pd.DataFrame | None:
    """Where a folder's cells trained on more than one device class (contracts/devices.py): per row, the classes of
    the selection cells that chose its lr and of the cells that score it ('selection 8 GPU + 8 CPU; score CPU');
    None where every cell trained on one class, as the table then needs no column."""
    if "device" not in cells or len(known_classes(cells["device"])) < 2:
        return None

    def classes(group: pd.DataFrame) -> str:
        counts = group["device"].map(device_class).value_counts().sort_index()
        return " + ".join(f"{n} {c}" for c, n in counts.items()) if len(counts) > 1 else str(counts.index[0])

    rows = []
    chosen = selecting(cells)
    for key, row in chosen.groupby(keys, dropna=False, sort=True):
        where = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        scored = at_selected
        for k, v in where.items():
            scored = scored[scored[k] == v]
        rows.append({**where, "devices": f"selection {classes(row)}; score {classes(scored) if len(scored) else '—'}"})
    return pd.DataFrame(rows)


def with_edge_reasons(selected: pd.DataFrame, cells: pd.DataFrame, keys: list[str], lr_grid: LrGrid,
                      bracket_max_steps: int | None, *, bracketing: bool | None = None,
                      lr_bounds: Sequence[float] = DEFAULT_LR_BOUNDS, lr_lattice: RowLattice = None) -> pd.DataFrame:
    """`edge_why` per row: why bracketing left it where it is (contracts.bracketing.bracket_row, the rule the sweep
    queues by): "bracketing off", "cap reached", "lr bound 1e-05", "unfinished" (a next round is due), or "" (an
    interior best with signal). `bracketing` defaults to `bracket_max_steps is not None` (the older callers' sign).
    `lr_grid`: the suite's lr axis, or its `Suite.lr_grid` (a row's own grid by its layer: `lr_by_layer`), and
    `lr_lattice` the lattice a row with its own grid steps on (`Suite.lr_lattice`; None: each grid's own)."""
    on = bracketing if bracketing is not None else bracket_max_steps is not None
    lrs = per_lr(cells, keys)
    why = []
    for row in selected.to_dict("records"):
        side = {"low": "low", "high": "high"}.get(row["edge"])
        grid = lr_grid(row.get("layer")) if callable(lr_grid) else lr_grid
        if not grid or len(set(grid)) < 2:
            why.append("")
            continue
        if not on:
            why.append("bracketing off" if side else "")
            continue
        mine = lrs
        for k in keys:
            mine = mine[(mine[k] == row[k]) | (mine[k].isna() & (row[k] != row[k]))]
        plan = bracket_row(dict(zip(mine["lr"], mine["seeds"], strict=True)), grid, bounds=lr_bounds,
                           max_steps=bracket_max_steps, lattice=lr_lattice(row.get("layer")) if lr_lattice else None)
        why.append(stop_text(plan, side))
    return selected.assign(edge_why=why)


def stop_text(plan: RowBracket, side: str | None) -> str:
    """One row's bracketing state in words: a row with signal on an edge names that edge's stop; a row without
    signal names each side a bound stopped ("lr bound 1e-05 below")."""
    if plan.new:
        return "unfinished"
    if not plan.no_signal:
        return plan.stopped.get(side, "") if side else ""
    return ", ".join(f"{plan.stopped[s]} {'below' if s == 'low' else 'above'}" for s in ("low", "high")
                     if s in plan.stopped)
