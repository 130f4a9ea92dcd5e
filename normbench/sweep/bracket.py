"""lr bracketing (protocol v2): which cells to add while a row's selected lr sits at the edge of the lrs tried.

A row is one point of the matrix without lr and seed (e.g. depth=24, layer=rezero). While its selected lr, chosen on
val like everywhere else (spec.selection.choose_lr), is the smallest or largest lr tried, one more lr one grid step
beyond (the grid's own geometric ratio) is queued for every selection seed. Rounds repeat until the selected lr is
interior or `bracket_max_steps` lrs lie beyond that end of the grid (`edge_reason` names which).

Nothing else stops the search: a row whose lr means are flat within the seeds' spread, whose edge only the
tie-break chose, or whose seeds stalled is still extended (protocol v1 stopped there, and one stalled seed left
pre-LN at depth 36 selected at the smallest lr it tried). The one exception is a row that learned nothing: when every
cell of its selected lr sits at chance, the step goes *up* from the largest lr tried (too small a step size is the
usual reason), unless every seed there diverged: between chance and divergence there is nothing to find.
Pure: the runner queues what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from normbench.contracts.selection import (
    AT_CHANCE,
    DIVERGED,
    cell_at_chance,
    choose_lr,
    edge_side,
    lr_signal,
    lrs_beyond,
    seed_mean,
    select_value,
)
from normbench.contracts.suite import Suite


def grid_ratio(lrs: Iterable[float]) -> float:
    """The geometric step of an lr grid: (max / min) ** (1 / (len - 1)), e.g. 3 for [1e-3, 3e-3]."""
    grid = sorted(set(lrs))
    if len(grid) < 2:
        raise ValueError(f"an lr grid needs two values to have a ratio, got {grid}")
    return (grid[-1] / grid[0]) ** (1 / (len(grid) - 1))


def bracket_axes(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """The axes of the cells one step beyond the edge for every row whose best lr is at an edge.

    Args:
        suite: Gives the lr grid, the seeds, `bracket_max_steps` and the order of the axes.
        finished: (axes, result) of every finished cell of the suite, matrix and earlier rounds alike.

    Returns:
        Axes dicts in the matrix's key order (possibly already queued: the ledger skips those).
    """
    grid = sorted(suite.matrix["lr"])
    ratio = grid_ratio(grid)
    seeds = suite.matrix.get("seed", [None])
    rows: dict[tuple, dict[float, list[tuple[float, bool, bool]]]] = {}
    for axes, result in finished:
        row = tuple((k, axes[k]) for k in suite.matrix if k not in ("lr", "seed"))
        rows.setdefault(row, {}).setdefault(float(axes["lr"]), []).append(
            (select_value(result), result.get("status") == DIVERGED, cell_at_chance(result)))
    new = []
    for row, by_lr in rows.items():
        tried = sorted(by_lr)
        means = {lr: seed_mean(v for v, _, _ in by_lr[lr]) for lr in tried}
        best = choose_lr(means)
        if lr_signal({lr: [(v, c, d) for v, d, c in cells] for lr, cells in by_lr.items()}) == AT_CHANCE:
            best = tried[-1]  # nothing learned: step up from the largest lr, whatever the tie-break chose
            if all(d for _, d, _ in by_lr[best]):
                continue  # ... unless it blew up: nothing between chance and divergence to find
        side = edge_side(tried, best)
        if side is None or lrs_beyond(tried, grid, side) >= suite.bracket_max_steps:
            continue
        lr = float(f"{best * (ratio if side == 'high' else 1 / ratio):.4g}")
        fixed = dict(row)
        for seed in seeds:
            values = {**fixed, "lr": lr, "seed": seed}
            new.append({k: values[k] for k in suite.matrix})
    return new
