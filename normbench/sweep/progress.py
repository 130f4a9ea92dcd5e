"""One status line: cells done/total, the current cell's epoch and val, an ETA; finished cells show the scored val."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from normbench.contracts.names import StudyNames, study_kind
from normbench.contracts.results import CellResult
from normbench.contracts.selection import select_value
from normbench.contracts.suite import Suite
from normbench.sweep.pace import Pace, cell_costs

if TYPE_CHECKING:
    from normbench.sweep.adopt import Donors


def duration(seconds: float) -> str:
    """`1h02m` or `3m05s`: the ETA and every other span a sweep prints (a resumed checkpoint's age and work)."""
    seconds = int(max(0.0, seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _outcome(result: CellResult) -> str:
    """Status and the scored val top-1 (the final epoch's; diverged scores 0), or a pruned trial's last val."""
    if result.status == "pruned":
        return f"pruned after epoch {result.epochs_run}  val {result.final_val_top1:.1f}%"
    return f"{result.status}  val {select_value({'status': result.status, 'val_top1': result.val_top1}):.1f}%"


class Progress:
    """Rewrites one line on a terminal; else (logs, SLURM, CI) a line per finished cell, epochs every `log_every` s."""

    def __init__(self, total: int, done: int = 0, stream: TextIO | None = None, quiet: bool = False,
                 costs: dict[str, float] | None = None, log_every: float = 30.0) -> None:
        """`costs`: each cell's relative cost (depth x epochs, weighed by what its layer took here: sweep/pace.py;
        default 1), so the ETA after depth-6 or layernorm cells does not promise depth 36 or mhc at that speed.
        `log_every`: seconds between epoch lines without a terminal (0: every epoch)."""
        stream = stream or sys.stderr  # looked up per call: sys.stderr may be replaced after import (pytest)
        self.total, self.done, self.stream, self.quiet = total, done, stream, quiet
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.costs = costs or {}
        self.cost_left = sum(self.costs.values()) if costs else float(total - done)
        self.cost_done = 0.0
        self.cell, self.epochs = "", 0
        self.fused: list[str] = []  # the cells one fused model trains beside `cell`, at its epoch (train/fused.py)
        self.cell_fraction = 0.0  # of the current cell (and those fused with it), trained so far
        self.in_flight: dict[str, float] = {}  # cells other processes are training: the fraction done (`running`)
        self._trained_before: dict[str, float] = {}  # ... and the fraction each had when first seen
        self.unit: float | None = None  # seconds per unit of the costs (sweep/pace.py), once known
        self.uncounted: frozenset[str] = frozenset()  # study kinds whose cells this run leaves (--select-only)
        self.log_every, self._last_line = log_every, float("-inf")
        self._clear = "\r\033[K" if self.tty else ""  # return to the line's start and erase it

    def eta(self) -> str:
        """Time left, from elapsed time per unit of cost done (the trained part of the current cell and of those in
        flight counts, so finishing cells in pairs does not swing it); '?' before progress."""
        partial = sum(map(self._cost, self._training())) * self.cell_fraction
        partial += sum(self._cost(cell) * (fraction - self._trained_before.get(cell, 0.0))
                       for cell, fraction in self.in_flight.items())
        done = self.cost_done + partial
        if not done:
            return "?"
        per_unit = (time.monotonic() - self.started) / done
        return duration(per_unit * max(0.0, self.cost_left - partial))

    def add(self, costs: dict[str, float]) -> None:
        """More cells to run (a bracketing round), with their relative costs: counted in the total and the ETA."""
        self.total += len(costs)
        if self.costs:
            self.costs.update(costs)
            self.cost_left += sum(costs.values())
        else:
            self.cost_left += len(costs)

    def leave_out(self, count: int, cell_ids: Sequence[str] = ()) -> None:
        """`count` queued cells (those of `cell_ids` weighed at their costs) this run will not train
        (--select-only's scoring cells): out of the total and the time left."""
        self.total -= count
        if self.costs:
            self.cost_left -= sum(self.costs.pop(cell, 0.0) for cell in cell_ids)
        else:
            self.cost_left -= count

    def _cost(self, cell_id: str) -> float:
        return self.costs.get(cell_id, 1.0) if self.costs else 1.0

    def running(self, fractions: Mapping[str, float]) -> None:
        """The cells worker processes are training now, each with the fraction of its epochs done (the parent's).
        What a cell had when first seen (a checkpoint's epochs, replayed at once on resuming) is neither work of
        this run's nor left to do."""
        self._count_unseen(list(fractions))
        for cell, fraction in fractions.items():
            if cell not in self._trained_before:
                self._trained_before[cell] = fraction
                self.cost_left = max(0.0, self.cost_left - self._cost(cell) * fraction)
        self.in_flight = dict(fractions)

    def start_cell(self, cell_id: str, epochs: int, fused: Sequence[str] = ()) -> None:
        """`cell_id` trains now, in this process; `fused`: the cells one model trains beside it, epoch for epoch, each
        weighed in the ETA at its own cost (the line shows `cell_id (+N fused)`)."""
        self._count_unseen([cell_id, *fused])
        self.cell, self.epochs, self.cell_fraction, self.fused = cell_id, epochs, 0.0, list(fused)

    def _count_unseen(self, cells: Sequence[str]) -> None:
        """Cells a peer queued after this process counted (a bracketing round, the report stage) join the total when
        they show up here, at the mean cost known (without costs the cells are not known by name: nothing to do)."""
        if self.costs and (unseen := [c for c in cells if c not in self.costs]):
            self.add(dict.fromkeys(unseen, sum(self.costs.values()) / len(self.costs)))

    def _training(self) -> list[str]:
        return [self.cell, *self.fused] if self.cell else []

    def epoch(self, record: Mapping[str, Any]) -> None:
        self.cell_fraction = min(1.0, (record["epoch"] + 1) / max(1, self.epochs))
        if self.quiet or (not self.tty and time.monotonic() - self._last_line < self.log_every):
            return
        shown = self.cell + (f" (+{len(self.fused)} fused)" if self.fused else "")
        self._write(f"{self._clear}[{self.done}/{self.total}] {shown}  epoch {record['epoch'] + 1}/{self.epochs}"
                    f"  val {record['val_top1']:.1f}%  ETA {self.eta()}" + ("" if self.tty else "\n"))

    def end_cell(self, result: CellResult) -> None:
        cell, self.cell, self.cell_fraction, self.fused = self.cell, "", 0.0, []  # before the ETA: its cost now
        self.record(cell, result)  # counts as done

    def record(self, cell_id: str, result: CellResult | None, where: str = "") -> None:
        """Count a finished cell (`where`: the worker that trained it) and print its line; None: no stored result."""
        self._count_unseen([cell_id])
        self.done += 1
        self.in_flight.pop(cell_id, None)  # counted as done now, not also as in flight (nor as trained in part)
        self._stop_training(cell_id)
        cost = self._cost(cell_id) * (1.0 - self._trained_before.pop(cell_id, 0.0))
        self.cost_done += cost
        self.cost_left = max(0.0, self.cost_left - cost)
        if self.quiet:
            return
        outcome = "finished" if result is None else f"{_outcome(result)}  {result.seconds:.1f}s"
        self._write(f"{self._clear}[{self.done}/{self.total}] {cell_id}  {outcome}{where}  ETA {self.eta()}\n")

    def forget(self, cell_id: str) -> None:
        """`cell_id` stopped here without a result of this worker's (its claim lost): neither done nor still
        training; the line follows the next fused member, if any."""
        self._stop_training(cell_id)
        if not self.cell:
            self.cell_fraction = 0.0

    def _stop_training(self, cell_id: str) -> None:
        """`cell_id` no longer trains in this process: a fused member that ended early hands the line to the next,
        at the same epoch."""
        if cell_id in self.fused:
            self.fused.remove(cell_id)
        elif cell_id == self.cell:
            self.cell = self.fused.pop(0) if self.fused else ""

    def note(self, text: str) -> None:
        if not self.quiet:
            self._write(f"{self._clear}{text}\n")

    def _write(self, text: str) -> None:
        self._last_line = time.monotonic()
        self.stream.write(text)
        self.stream.flush()


def note_new_cells(progress: Progress, suite: Suite, study_name: str, cells: dict[str, dict[str, Any]],
                   pace: Pace) -> None:
    """Count a bracketing round's or the report stage's new cells (`{cell_id: axes}`) in the progress line, each
    weighed at `pace` (this host's, sweep/run.py `pace_of`) in the unit of the costs queued so far; a stage this run
    leaves (`progress.uncounted`) is only said."""
    if study_kind(study_name) in progress.uncounted:
        progress.note(f"{study_kind(study_name)} stage queued ({len(cells)} cells), left for a run without "
                      "--select-only")
        return
    progress.unit = progress.unit or pace.per_depth_epoch  # the unit of the costs queued so far, kept from then on
    progress.add(cell_costs(suite, cells, dataclasses.replace(pace, per_depth_epoch=progress.unit)))
    names = StudyNames(suite.name)
    if study_name == names.report:
        progress.note(f"selection over: {len(cells)} report cells (each row's chosen lr on report seeds "
                      f"{suite.report_seeds})")
    elif study_name == names.budget:
        progress.note(f"convergence check: {len(cells)} cells (each row's chosen lr at twice the epochs)")
    elif study_name == names.claims:
        progress.note(f"claim round: {len(cells)} cells (more report seeds for the rows of the claims still open: "
                      f"{sorted({axes.get('layer') for axes in cells.values()})})")
    else:
        progress.note(f"bracket round {study_name.rsplit(':', 1)[-1]}: {len(cells)} cells (lrs beyond those a row "
                      "tried, or selection seeds an earlier round lacked)")


def note_adopted(progress: Progress, cell_ids: set[str], donors: Donors) -> None:
    """Count cells a round or stage took finished from donor folders (sweep/adopt.py) as queued and done."""
    progress.total += len(cell_ids)
    progress.done += len(cell_ids)
    progress.note(f"adopted {len(cell_ids)} finished cell(s) of this recipe from {donors.sources(cell_ids)} instead of "
                  "training them")
