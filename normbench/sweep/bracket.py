"""lr bracketing: the cells a round adds, one per selection seed at each lr that contracts.bracketing.bracket_row
asks of a row (protocol v3: v2's steps beyond an edge for rows with signal, both ways by half decades for rows at
chance or flat, within the suite's `lr_bounds`). A row whose lrs do not all have every selection seed (seeds added to
a resumed suite: its earlier rounds ran on fewer) first gets the seeds it lacks, and nothing else: lr means on
different seeds would decide the next lr, the selected lr and the claims that pair seeds on unequal ground. Pure."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from normbench.contracts.bracketing import bracket_row, grid_ratio
from normbench.contracts.selection import DIVERGED, cell_at_chance, select_value
from normbench.contracts.suite import Suite

__all__ = ["bracket_axes", "grid_ratio", "missing_seeds", "rows_by_lr"]


def rows_by_lr(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]
               ) -> dict[tuple, dict[float, list[tuple[float, bool, bool]]]]:
    """Per row (its row axes' (key, value) pairs): lr -> the (select, at chance, diverged) triple of each cell."""
    rows: dict[tuple, dict[float, list[tuple[float, bool, bool]]]] = {}
    for axes, result in finished:
        row = tuple((k, axes[k]) for k in suite.row_axes())
        rows.setdefault(row, {}).setdefault(float(axes["lr"]), []).append(
            (select_value(result), cell_at_chance(result), result.get("status") == DIVERGED))
    return rows


def bracket_axes(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]],
                 queued: Collection[str] = frozenset()) -> list[dict[str, Any]]:
    """The axes (matrix key order) of the next round's cells for every row that asks for lrs, from `finished`: (axes,
    result) of every finished selection cell, matrix and earlier rounds. Some may be queued already. `queued`: the ids
    of every cell queued so far in any state; a seed queued before and failed for good is not asked for again."""
    seeds = suite.matrix.get("seed", [None])
    missing = missing_seeds(suite, finished, queued)
    new = []
    for row, by_lr in rows_by_lr(suite, finished).items():
        if row in missing:  # its lrs' means first rest on the same seeds
            new.extend(missing[row])
            continue
        layer = dict(row).get("layer")
        plan = bracket_row(by_lr, suite.lr_grid(layer), bounds=suite.lr_bounds, max_steps=suite.bracket_max_steps,
                           lattice=suite.lr_lattice(layer))
        for lr in plan.new:
            for seed in seeds:
                new.append(_axes(suite, row, lr, seed))
    return new


def missing_seeds(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]],
                  queued: Collection[str] = frozenset()) -> dict[tuple, list[dict[str, Any]]]:
    """Per row: the axes of the selection seeds its tried lrs lack, never queued before (`queued`: cell ids)."""
    seeds = suite.matrix.get("seed", [None])
    have: dict[tuple, dict[float, set[Any]]] = {}
    for axes, _ in finished:
        row = tuple((k, axes[k]) for k in suite.row_axes())
        have.setdefault(row, {}).setdefault(axes["lr"], set()).add(axes.get("seed"))
    missing = {}
    for row, by_lr in have.items():
        cells = [axes for lr, got in sorted(by_lr.items()) for seed in seeds if seed not in got
                 if suite.cell(axes := _axes(suite, row, lr, seed)).cell_id not in queued]
        if cells:
            missing[row] = cells
    return missing


def _axes(suite: Suite, row: tuple, lr: float, seed: Any) -> dict[str, Any]:
    values = {**dict(row), "lr": lr, "seed": seed}
    return {k: values[k] for k in suite.matrix}
