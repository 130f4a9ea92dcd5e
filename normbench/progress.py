"""One status line for a suite: cells done/total, the current cell's epoch and accuracy, and an ETA."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """Rewrites one line on a terminal; prints a line per finished cell otherwise (logs, CI)."""

    def __init__(self, total: int, done: int = 0, stream: TextIO | None = None, quiet: bool = False,
                 costs: dict[str, float] | None = None) -> None:
        """`costs`: the relative cost of each cell still to run (depth x epochs), so that the ETA after a few
        depth-6 cells does not promise depth 36 at the same speed. Without it every cell counts as 1."""
        stream = stream or sys.stderr  # looked up per call: sys.stderr may be replaced after import (pytest)
        self.total, self.done, self.stream, self.quiet = total, done, stream, quiet
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.costs = costs or {}
        self.cost_left = sum(self.costs.values()) if costs else float(total - done)
        self.cost_done = 0.0
        self.cell, self.epochs = "", 0
        self._clear = "\r\033[K" if self.tty else ""  # return to the line's start and erase it

    def eta(self) -> str:
        if not self.cost_done:
            return "?"
        per_unit = (time.monotonic() - self.started) / self.cost_done
        return _duration(per_unit * self.cost_left)

    def start_cell(self, cell_id: str, epochs: int) -> None:
        self.cell, self.epochs = cell_id, epochs

    def epoch(self, record: dict[str, Any]) -> None:
        if self.tty and not self.quiet:
            self._write(f"{self._clear}[{self.done}/{self.total}] {self.cell}"
                        f"  epoch {record['epoch'] + 1}/{self.epochs}  val {record['val_top1']:.1f}%  ETA {self.eta()}")

    def end_cell(self, result: dict[str, Any]) -> None:
        self.done += 1
        cost = self.costs.get(self.cell, 1.0) if self.costs else 1.0
        self.cost_done += cost
        self.cost_left = max(0.0, self.cost_left - cost)
        if not self.quiet:
            self._write(f"{self._clear}[{self.done}/{self.total}] {self.cell}  {result['status']}"
                        f"  best val {result['best_val_top1']:.1f}%  {result['seconds']:.1f}s  ETA {self.eta()}\n")

    def note(self, text: str) -> None:
        if not self.quiet:
            self._write(f"{self._clear}{text}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
