"""`lr_by_layer`: a layer's own lr grid in place of `matrix.lr`, for rows whose good lrs are known to lie far from the
others' (a variant whose selected lr at the shorter budget was 100x its baseline's). Starting such a row on the shared
grid buys nothing: bracketing walks it there one grid step a round, each step a cell per selection seed.

A row's own grid must sit on the shared grid's lattice (contracts/bracketing.py `lattice_value`: the grid's lrs, then
the values bracketing steps to beyond its ends, each rounded to 4 significant digits), and its bracketing steps along
that lattice, so its lrs and every other row's meet on one set of values: the lr sensitivity (over the lrs rows
share), plots and the cells another suite adopts line up. Pure: read by contracts/suite.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from normbench.contracts.bracketing import grid_ratio, lattice_position, lattice_value
from normbench.errors import SuiteError, did_you_mean


def parse_lr_by_layer(raw: Any, matrix: dict[str, list[Any]], layers: Sequence[str], *, bracket: bool,
                      where: str) -> dict[str, list[float]]:
    """`{layer: [lr, ...]}`, checked: layers of the suite, positive lrs without repeats, at least two when bracketing
    (a step beyond an edge is the grid's ratio), and on the lattice of `matrix.lr`."""
    if raw is None or raw == {}:
        return {}
    at = f"{where}: lr_by_layer"
    if not isinstance(raw, dict):
        raise SuiteError(f"{at}: expected a mapping of layer -> list of lrs, e.g. {{peri_ln_out_gamma: [9.986e-3, "
                         f"3.156e-2]}}, got {raw!r}")
    shared = matrix.get("lr")
    if not isinstance(shared, list) or not shared:
        raise SuiteError(f"{at}: replaces `matrix.lr` for the layers it names, and the suite has no matrix.lr; add "
                         "the lrs every other layer trains at (matrix: {lr: [...]})")
    grids = {}
    for layer, lrs in raw.items():
        if layer not in layers:
            raise SuiteError(f"{at}.{layer}: not a layer of this suite{did_you_mean(str(layer), list(layers))} "
                             f"(layers: {', '.join(map(str, layers))})")
        lrs = lrs if isinstance(lrs, list) else [lrs]
        if not lrs or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in lrs):
            raise SuiteError(f"{at}.{layer}: expected a list of positive lrs, got {raw[layer]!r}")
        if len(set(lrs)) != len(lrs):
            raise SuiteError(f"{at}.{layer}: repeated lr in {lrs}")
        if bracket and len(lrs) < 2:
            beside = _nearest(lrs[0] * _ratio(shared), shared)
            raise SuiteError(f"{at}.{layer}: bracketing needs at least two lrs per grid (a step beyond the edge is "
                             f"the grid's ratio), got {lrs}; add one a grid step away, e.g. {beside}")
        off = [lr for lr in lrs if not on_lattice(lr, shared)]
        if len(shared) > 1 and off:
            raise SuiteError(f"{at}.{layer}: {off} off the lattice of matrix.lr {shared} (ratio "
                             f"{grid_ratio(shared):.4g}), where bracketing and every other row step; use lrs a whole "
                             f"number of its steps from it, e.g. {_nearest(off[0], shared)}")
        grids[str(layer)] = [float(lr) for lr in lrs]
    return grids


def on_lattice(lr: float, grid: Sequence[float]) -> bool:
    """Whether `lr` is a value of `grid`'s lattice: one of its lrs, or one bracketing steps to from its ends."""
    if len(set(grid)) < 2:
        return True
    value = lattice_value(grid, lattice_position(lr, grid))
    return abs(lr - value) <= 1e-9 * value


def _ratio(grid: Sequence[float]) -> float:
    return grid_ratio(grid) if len(set(grid)) > 1 else math.sqrt(10)  # a one-lr grid: half a decade


def _nearest(lr: float, grid: Sequence[float]) -> str:
    """The lattice lr nearest `lr`, as bracketing steps to it from the grid (4 significant digits each step)."""
    if len(set(grid)) < 2:
        return f"{lr:.4g}"
    return f"{lattice_value(grid, lattice_position(lr, grid)):.4g}"
