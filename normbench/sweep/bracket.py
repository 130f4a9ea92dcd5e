"""lr bracketing (protocol v2): which cells to add while a row's selected lr sits at the edge of the lrs tried.

A row is a matrix point without lr and seed. While its val-selected lr (contracts.selection.choose_lr) is the smallest
or largest tried, one lr a grid step beyond (geometric ratio) is queued on every selection seed, until it is interior
or `bracket_max_steps` lrs lie beyond that end (`edge_reason` names which). Flat lr means, tie-break edges and stalled
seeds do not stop it (protocol v1 did: one stalled seed left pre-LN at depth 36 at its smallest lr). A row at chance
steps *up* from the largest lr (too small a step is the usual cause), unless every seed there diverged. Pure."""

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
    """The axes (matrix key order) of the cells one step beyond the edge for every row whose best lr is at an edge,
    from `finished`: (axes, result) of every finished cell, matrix and earlier rounds. Some may be queued already."""
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
