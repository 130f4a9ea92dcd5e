"""The status line's ETA weighs the cells still to run by their cost, so deep cells are not promised at the speed
of shallow ones."""

from __future__ import annotations

import io

from normbench import progress as progress_module
from normbench.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finish(progress: Progress, cell: str, clock: Clock, seconds: float) -> None:
    progress.start_cell(cell, epochs=1)
    clock.now += seconds
    progress.end_cell({"status": "ok", "best_val_top1": 50.0, "seconds": seconds})


def test_eta_scales_with_the_cost_of_the_cells_left(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    costs = {"depth=6": 6.0, "depth=12": 12.0, "depth=36": 36.0}
    progress = Progress(total=3, stream=io.StringIO(), costs=costs)
    assert progress.eta() == "?"
    finish(progress, "depth=6", clock, 60.0)  # 10 s per unit of depth: 48 units left -> 8 minutes
    assert progress.eta() == "8m00s"
    finish(progress, "depth=12", clock, 120.0)
    assert progress.eta() == "6m00s"


def test_without_costs_every_cell_counts_as_one(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=4, done=1, stream=stream)
    finish(progress, "a", clock, 30.0)
    assert progress.eta() == "1m00s"
    assert "[2/4] a  ok  best val 50.0%  30.0s  ETA 1m00s" in stream.getvalue()
