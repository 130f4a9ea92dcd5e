"""lr bracketing, protocol v3: which lrs a row adds next, and why it adds none. Written once: the sweep queues what
`bracket_row` returns and the leaderboard's edge column prints the reason it gives. Pure.

A row is a matrix point without lr and seed; `by_lr` maps each lr it tried to its selection cells' (select value, at
chance, diverged) triples, one per seed (contracts.selection.lr_signal reads the same).

- A row whose lrs carry signal keeps protocol v2's rule: while no lr on one side of its val-selected lr has a lower
  mean (the best is the smallest or largest tried, or ties with the lrs beyond it), one grid step beyond that side's
  last lr (the grid's geometric ratio) is queued, until the suite's optional `bracket_max_steps` cap is reached or
  the next lr would leave `lr_bounds`.
- A row with no signal (every cell of its best lr at chance, or lr means flat within the seeds' spread) has no optimum
  to stay near, so an interior best proves nothing (NormFormer sat at chance at three lrs and was never tried lower).
  It is extended both ways, from its smallest and largest lr, by about half a decade per round (whole grid steps,
  so every lr stays on the grid's lattice and is shared with v2's steps), until it gains signal, the next lr would
  leave `lr_bounds` (or pass the optional cap), or an lr tried on that side diverged on every seed. A lower mean
  settles nothing here: at chance it is noise, and a mean clearly lower would have given the row signal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from normbench.contracts.selection import AT_CHANCE, FLAT, choose_lr, lr_signal, lrs_beyond, seed_mean

DEFAULT_LR_BOUNDS = (1.0e-5, 1.0e-1)  # AdamW on a ViT: below 1e-5 nothing moves in a benchmark's budget; above
HALF_DECADE = math.sqrt(10.0)          # 1e-1 every recipe here diverges
SIDES = ("low", "high")

Triple = tuple[float, bool, bool]  # (select value, at chance, diverged) of one seed's cell


@dataclass(frozen=True)
class RowBracket:
    """What bracketing does next for one row: `new` lrs to queue (each on every selection seed), and per side that
    wanted to go further but will not, why: "cap reached", "lr bound <value>" or "bracketing off"."""
    new: tuple[float, ...] = ()
    stopped: dict[str, str] = field(default_factory=dict)
    no_signal: bool = False


def grid_ratio(lrs: Iterable[float]) -> float:
    """The geometric step of an lr grid: (max / min) ** (1 / (len - 1)), e.g. 3 for [1e-3, 3e-3]."""
    grid = sorted(set(lrs))
    if len(grid) < 2:
        raise ValueError(f"an lr grid needs two values to have a ratio, got {grid}")
    return (grid[-1] / grid[0]) ** (1 / (len(grid) - 1))


def steps_per_round(ratio: float) -> int:
    """The whole number of grid steps nearest half a decade, at least one (1 for a ratio of 3 or 3.16, 2 for 2)."""
    return max(1, round(math.log(HALF_DECADE) / math.log(ratio)))


def step(lr: float, ratio: float, side: str, steps: int = 1) -> float:
    """`lr` moved `steps` grid steps down or up, rounded to 4 significant digits after each step (the lattice v2's
    cells already sit on: 1e-3 / 3.16 is 0.0003165, whichever rule stepped there)."""
    for _ in range(steps):
        lr = float(f"{lr * (ratio if side == 'high' else 1 / ratio):.4g}")
    return lr


def lattice_value(grid: Sequence[float], position: int) -> float:
    """The lr at `position` on `grid`'s lattice: its own values (0 the smallest), then `step`'s chain beyond each end,
    the values bracketing a row of that grid reaches (1e-3 / 3.16 is 0.0003165)."""
    lrs = sorted(set(grid))
    if position < 0:
        return step(lrs[0], grid_ratio(lrs), "low", -position)
    if position >= len(lrs):
        return step(lrs[-1], grid_ratio(lrs), "high", position - len(lrs) + 1)
    return lrs[position]


def lattice_position(lr: float, grid: Sequence[float]) -> int:
    """The lattice position nearest `lr` (whole steps of the grid's ratio from its smallest value)."""
    lrs = sorted(set(grid))
    return round(math.log(lr / lrs[0]) / math.log(grid_ratio(lrs)))


def lattice_step(lr: float, grid: Sequence[float], side: str, steps: int = 1) -> float:
    """`lr` (a lattice value) moved `steps` positions down or up `grid`'s lattice."""
    return lattice_value(grid, lattice_position(lr, grid) + (steps if side == "high" else -steps))


def within(lr: float, bounds: Sequence[float]) -> bool:
    return bounds[0] * (1 - 1e-9) <= lr <= bounds[1] * (1 + 1e-9)


def bracket_row(by_lr: Mapping[float, Iterable[Triple]], grid: Sequence[float], *,
                bounds: Sequence[float] = DEFAULT_LR_BOUNDS, max_steps: int | None = None,
                lattice: Sequence[float] | None = None) -> RowBracket:
    """The next round for one row (module docstring). `grid` is the row's start grid (the suite's lr axis, or its
    `lr_by_layer` entry); `max_steps` the optional cap on v2's steps beyond each end of it (None: only `bounds`
    stop); `lattice`: for a row with its own grid, the suite's lr axis, whose lattice its steps land on (the values
    the shared rows step to, not steps from its own edges, which 4-digit rounding would set apart: 0.003166 for
    0.003165)."""
    cells = {float(lr): list(triples) for lr, triples in by_lr.items()}
    tried = sorted(cells)
    means = {lr: seed_mean(v for v, _, _ in cells[lr]) for lr in tried}
    best = choose_lr(means)
    ratio = grid_ratio(lattice or grid)

    def beyond(lr: float, side: str, steps: int = 1) -> float:
        return lattice_step(lr, lattice, side, steps) if lattice else step(lr, ratio, side, steps)
    signal = lr_signal(cells)
    if signal not in (AT_CHANCE, FLAT):  # v2: step from an edge the best sits on (or ties with), one grid step
        new, stopped = [], {}
        for side in SIDES:
            there = [lr for lr in tried if (lr < best if side == "low" else lr > best)]
            if any(means[lr] < means[best] for lr in there):
                continue  # a lower mean on this side: the best is bracketed here
            if max_steps is not None and lrs_beyond(tried, sorted(grid), side) >= max_steps:
                stopped[side] = "cap reached"
                continue
            lr = beyond(tried[0] if side == "low" else tried[-1], side)
            if within(lr, bounds):
                new.append(lr)
            else:
                stopped[side] = _bound(side, bounds)
        return RowBracket(new=tuple(new), stopped=stopped)
    new, stopped = [], {}
    for side in SIDES:
        if _diverged_beyond(cells, best, side):
            continue  # nothing between no signal and divergence to find there
        if max_steps is not None and lrs_beyond(tried, sorted(grid), side) >= max_steps:
            stopped[side] = "cap reached"
            continue
        lr = beyond(tried[0] if side == "low" else tried[-1], side, steps_per_round(ratio))
        if within(lr, bounds):
            new.append(lr)
        else:
            stopped[side] = _bound(side, bounds)
    return RowBracket(new=tuple(new), stopped=stopped, no_signal=True)


def _diverged_beyond(cells: Mapping[float, list[Triple]], best: float, side: str) -> bool:
    """Whether an lr tried on `side` of the best diverged on every seed."""
    return any(triples and all(d for _, _, d in triples) for lr, triples in cells.items()
               if (lr < best if side == "low" else lr > best))


def _bound(side: str, bounds: Sequence[float]) -> str:
    return f"lr bound {bounds[0] if side == 'low' else bounds[1]:g}"
