"""lr bracketing: the cells a round adds, one per selection seed at each lr that contracts.bracketing.bracket_row
asks of a row (protocol v3: v2's steps beyond an edge for rows with signal, both ways by half decades for rows at
chance or flat, within the suite's `lr_bounds`). Pure."""

from __future__ import annotations

from typing import Any

from normbench.contracts.bracketing import bracket_row, grid_ratio
from normbench.contracts.selection import DIVERGED, cell_at_chance, select_value
from normbench.contracts.suite import Suite

__all__ = ["bracket_axes", "grid_ratio", "rows_by_lr"]


def rows_by_lr(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]
               ) -> dict[tuple, dict[float, list[tuple[float, bool, bool]]]]:
    """Per row (its row axes' (key, value) pairs): lr -> the (select, at chance, diverged) triple of each cell."""
    rows: dict[tuple, dict[float, list[tuple[float, bool, bool]]]] = {}
    for axes, result in finished:
        row = tuple((k, axes[k]) for k in suite.row_axes())
        rows.setdefault(row, {}).setdefault(float(axes["lr"]), []).append(
            (select_value(result), cell_at_chance(result), result.get("status") == DIVERGED))
    return rows


def bracket_axes(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """The axes (matrix key order) of the next round's cells for every row that asks for lrs, from `finished`: (axes,
    result) of every finished selection cell, matrix and earlier rounds. Some may be queued already."""
    seeds = suite.matrix.get("seed", [None])
    new = []
    for row, by_lr in rows_by_lr(suite, finished).items():
        plan = bracket_row(by_lr, suite.matrix["lr"], bounds=suite.lr_bounds, max_steps=suite.bracket_max_steps)
        for lr in plan.new:
            for seed in seeds:
                values = {**dict(row), "lr": lr, "seed": seed}
                new.append({k: values[k] for k in suite.matrix})
    return new
