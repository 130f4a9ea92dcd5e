"""What a queued cell will cost, learnt from the cells this machine has finished: the weights of the ETA.

Depth x epochs alone misjudges a queue of mixed layers: at depth 36 a `hc` cell trains about twice as long as a
`layernorm` one and an `mhc` cell nearly five times (results/depth-sweep-digits-modern/cost-cpu-*.md).
Each cell this host finished gives its shape (every axis but those that leave an epoch's time unchanged) seconds per
epoch. Costs stay in one unit, depth x epochs, whatever has finished, because the progress line adds costs weighed
before any cell finished to costs weighed after: a cell of unknown shape costs depth x epochs, one of a known shape
epochs x its seconds per epoch over the median seconds per depth-epoch here. Cells other machines trained (a lent GPU)
say nothing of this one's speed."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial

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
    def learn(cls, trials: Iterable[FrozenTrial], host: str, depth_of: Callable[[dict[str, Any]], int]) -> Pace:
        """From finished trials with a stored result whose worker ran on `host` (the `worker_host` user attr);
        `depth_of(axes)`: the cell's number of blocks (an axis or the suite's model)."""
        by_shape: dict[Shape, list[float]] = {}
        per_depth: list[float] = []
        for t in trials:
            result, axes = t.user_attrs.get("result"), t.user_attrs.get("axes")
            if t.user_attrs.get("worker_host") != host or not result or axes is None:
                continue
            seconds, epochs = result.get("seconds"), result.get("epochs_run")
            if not seconds or not epochs:  # no time recorded, or stopped before an epoch
                continue
            by_shape.setdefault(shape_of(axes), []).append(seconds / epochs)
            per_depth.append(seconds / epochs / depth_of(axes))
        return cls({shape: statistics.median(v) for shape, v in by_shape.items()},
                   statistics.median(per_depth) if per_depth else None)

    def cost(self, axes: Mapping[str, Any], depth: int, epochs: int) -> float:
        """The cost of `axes` (a cell of `depth` blocks trained `epochs` epochs) in depth-epochs at this host's
        median pace: its shape's own seconds when this host trained that shape, else depth x epochs."""
        known = self.per_epoch.get(shape_of(axes))
        if known is None or not self.per_depth_epoch:
            return float(depth * epochs)
        return known / self.per_depth_epoch * epochs
