"""What a queued cell will cost, learnt from the cells this machine has finished: the weights of the ETA.

Depth x epochs alone misjudges a queue of mixed layers: at depth 36 a `hc` cell trains about twice as long as a
`layernorm` one and an `mhc` cell nearly five times (results/depth-sweep-digits-modern/cost-cpu-*.md).
Each cell this host finished gives its shape (every axis but those that leave an epoch's time unchanged) seconds per
epoch. Costs stay in one unit, depth x epochs, whatever has finished, because the progress line adds costs weighed
before any cell finished to costs weighed after: a cell of unknown shape costs depth x epochs, one of a known shape
epochs x its seconds per epoch over the median seconds per depth-epoch here. Cells other machines trained (a lent GPU)
say nothing of this one's speed, even under the same host name (a lent GPU machine may be called what this one is):
"here" is the host and the device a cell's result names."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial

from normbench.contracts.recipe import CellConfig
from normbench.contracts.suite import Suite

FREE_AXES = frozenset({"lr", "seed", "epochs", "warmup_epochs"})  # the budget check stretches the last two

Shape = tuple[tuple[str, str], ...]


def shape_of(axes: Mapping[str, Any]) -> Shape:
    return tuple(sorted((k, str(v)) for k, v in axes.items() if k not in FREE_AXES))


@dataclass(frozen=True)
class Pace:
    """Median seconds per epoch of each shape finished here, and per depth-epoch over all of them (the unit)."""

    per_epoch: dict[Shape, float] = field(default_factory=dict)
    per_depth_epoch: float | None = None

    @classmethod
    def learn(cls, trials: Iterable[FrozenTrial], host: str, depth_of: Callable[[dict[str, Any]], int],
              device: str | None = None) -> Pace:
        """From finished trials with a stored result whose worker ran on `host` (the `worker_host` user attr) and,
        given `device`, trained there (the result's `device`: train/device.py's `device_name`); `depth_of(axes)`:
        the cell's number of blocks (an axis or the suite's model)."""
        by_shape: dict[Shape, list[float]] = {}
        per_depth: list[float] = []
        for t in trials:
            result, axes = t.user_attrs.get("result"), t.user_attrs.get("axes")
            if t.user_attrs.get("worker_host") != host or not result or axes is None:
                continue
            if device is not None and result.get("device") != device:
                continue
            seconds, epochs = result.get("seconds"), result.get("epochs_run")
            if not seconds or not epochs:  # no time recorded, or stopped before an epoch
                continue
            # a fused member's `seconds` are its share of its group's already (train/fused.py): not divided again
            by_shape.setdefault(shape_of(axes), []).append(seconds / epochs)
            per_depth.append(seconds / epochs / depth_of(axes))
        return cls({shape: statistics.median(v) for shape, v in by_shape.items()},
                   statistics.median(per_depth) if per_depth else None)

    def seconds(self, axes: Mapping[str, Any], depth: int, epochs: int) -> float | None:
        """One worker's seconds here for `axes` (a cell of `depth` blocks trained `epochs` epochs): its shape's own
        seconds per epoch when this host trained that shape, else the median pace per depth-epoch; None before any
        cell finished here."""
        if not self.per_depth_epoch:
            return None
        known = self.per_epoch.get(shape_of(axes))
        return (known if known is not None else self.per_depth_epoch * depth) * epochs

    def cost(self, axes: Mapping[str, Any], depth: int, epochs: int) -> float:
        """The cost of `axes` in depth-epochs at this host's median pace (`seconds` in that unit); depth x epochs
        before any cell finished here."""
        seconds = self.seconds(axes, depth, epochs)
        return float(depth * epochs) if seconds is None or not self.per_depth_epoch else seconds / self.per_depth_epoch


def cell_costs(suite: Suite, cells: dict[str, dict[str, Any]], pace: Pace) -> dict[str, float]:
    """`{cell_id: the ETA's weight}`: each cell's cost in depth-epochs, weighed by its shape's pace here."""
    configs = {cid: suite.cell(axes).config for cid, axes in cells.items()}
    return {cid: pace.cost(cells[cid], c.model.depth, c.train.epochs) for cid, c in configs.items()}


def time_left(suite: Suite, left: dict[str, dict[str, Any]], pace: Pace) -> str:
    """'time left: N queued cells, about H hours of one worker's training ...' for the cells `left` at this host's
    pace so far; '' when none is left or this host has finished no cell."""
    if not left or not pace.per_depth_epoch:
        return ""
    hours = sum(cell_costs(suite, left, pace).values()) * pace.per_depth_epoch / 3600
    return (f"time left: {len(left)} queued cells, about {hours:.1f} hours of one worker's training at this host's "
            "pace so far (each layer at the speed its cells had here; N workers side by side: divide by N; stages "
            "not queued yet are not counted)")


def step_time_left(suite: Suite, left: dict[str, dict[str, Any]], step_ms: Mapping[tuple[str, int], float],
                   train_size: Callable[[CellConfig], int], measured: str, bench: str) -> str:
    """Before any cell finished here: the cells `left` at the train step `measured` timed for each (layer, depth)
    (`normbench bench SUITE`'s cost file) times each cell's steps (`train_size(config)` images a batch at a time, for
    its epochs); '' when none is left, or what the file lacks and the command (`bench`) that measures it."""
    if not left:
        return ""
    configs = [suite.cell(axes).config for axes in left.values()]
    lacking = sorted({(c.model.layer, c.model.depth) for c in configs} - set(step_ms))
    if lacking:
        shapes = ", ".join(f"{layer} at depth {depth}" for layer, depth in lacking)
        return f"time left: not known: {measured} has no train step of {shapes}; `{bench}` measures them"
    seconds = sum(step_ms[(c.model.layer, c.model.depth)] / 1000 * c.train.epochs
                  * math.ceil(train_size(c) / c.train.batch_size) for c in configs)
    hours = seconds / 3600
    return (f"time left: {len(left)} queued cells, about {hours:.1f} hours of one worker's training at the train step "
            f"measured here ({measured}; training steps only, evaluation not counted; N workers side by side: divide "
            "by N; stages not queued yet are not counted)")
