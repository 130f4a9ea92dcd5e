"""The edited-matrix rule, written once: which of a ledger's cells are the suite's as its file says now.

A suite's matrix may change between runs of one output folder (an lr dropped, a layer added). The cells it no longer
lists are neither trained nor scored; their records stay in the ledger (put the value back and they count again).
The job list (sweep/run.py), the dry run (sweep/dry_run.py) and the report (report/frames.py) all ask `MatrixScope`.

- a matrix cell (`run:<suite>`) is listed when the matrix still lists its axes;
- a bracketing round's cell (`bracket:<suite>:<n>`) when its axes but lr are a matrix cell's: the rounds add lrs
  beyond the grid, so a cell bracketing added stays the suite's own while its row and seed are listed;
- a report stage's cell (`report:`, `budget:`) when its row is a matrix row and its seed one of `report_seeds`;
- a claim round's cell (`claims:`) when its row is a matrix row and its seed one the rounds may train
  (`Suite.claim_seeds`);
- other studies (`tune:`, `tuned:`) are not the matrix's to judge: listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import Suite, cell_id

WHY = "the suite's matrix no longer lists them (edited since they ran); their records stay in the ledger"
_STRETCHED = ("epochs", "warmup_epochs")  # the convergence check's own (Suite.budget_axes; no epochs axis with it)


@dataclass
class MatrixScope:
    """`holds(study, axes)`: is this ledger cell the current suite's? Built once per suite (sets of ids)."""

    suite: Suite
    _matrix: set[str] = field(init=False)
    _but_lr: set[str] = field(init=False)
    _rows: set[str] = field(init=False)

    def __post_init__(self) -> None:
        cells = [c.axes for c in self.suite.cells()]
        self._matrix = {cell_id(a) for a in cells}
        self._but_lr = {cell_id(_without(a, ("lr",))) for a in cells}
        self._rows = {cell_id(_without(a, ("lr", "seed"))) for a in cells}

    def holds(self, study_name: str, axes: dict[str, Any]) -> bool:
        names = StudyNames(self.suite.name)
        if study_name == names.run:
            return cell_id(axes) in self._matrix
        if names.bracket_round(study_name) is not None:
            return cell_id(_without(axes, ("lr",))) in self._but_lr
        if study_name in (names.report, names.budget, names.claims):
            row = _without(axes, ("lr", "seed", *(_STRETCHED if study_name == names.budget else ())))
            seeds = self.suite.claim_seeds() if study_name == names.claims else self.suite.report_seeds
            seeded = "seed" not in axes or axes["seed"] in seeds
            return seeded and cell_id(row) in self._rows
        return True


def _without(axes: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in axes.items() if k not in keys}
