"""Fresh seeds report: once selection is over, each row's chosen lr is trained on the suite's `report_seeds`.

The selection seeds chose the lr (contracts.selection.choose_lr); report seeds never took part, so a seed lucky on val
cannot also report (val and test correlate). Pure: the runner queues it once selection and bracketing are done."""

from __future__ import annotations

from typing import Any

from normbench.contracts.selection import choose_lr, seed_mean, select_value
from normbench.contracts.suite import BUDGET_SEEDS, Suite


def chosen_lr_by_row(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[tuple, float]:
    """`{row: lr}` over finished selection cells; a row is `((axis, value), ...)` in file order without lr and seed."""
    base_lr = float(suite.cell({}).config.train.lr)
    by_row: dict[tuple, dict[float, list[float]]] = {}
    for axes, result in finished:
        row = tuple((k, axes[k]) for k in suite.row_axes())
        lr = float(axes.get("lr", base_lr))
        by_row.setdefault(row, {}).setdefault(lr, []).append(select_value(result))
    return {row: choose_lr({lr: seed_mean(v) for lr, v in by_lr.items()}) for row, by_lr in by_row.items()}


def report_axes(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """The axes of every report cell: each row's chosen lr on each report seed (matrix key order, then `seed`)."""
    cells = []
    for row, lr in chosen_lr_by_row(suite, finished).items():
        for seed in suite.report_seeds:
            values = {**dict(row), "lr": lr, "seed": seed}
            order = [*(k for k in suite.matrix if k in values), *(k for k in ("lr", "seed") if k not in suite.matrix)]
            cells.append({k: values[k] for k in order if k != "lr" or "lr" in suite.matrix})
    return cells


def budget_axes(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """The convergence check (`budget_check`): each row's chosen lr on its first BUDGET_SEEDS report seeds, at
    BUDGET_FACTOR x the epochs with the schedule stretched (Suite.budget_axes). [] without `budget_check`."""
    if not suite.budget_check:
        return []
    first = set(suite.report_seeds[:BUDGET_SEEDS])
    return [suite.budget_axes(axes) for axes in report_axes(suite, finished) if axes.get("seed") in first]
