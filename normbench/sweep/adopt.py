"""Cells another output folder already trained under this recipe, copied into this ledger instead of trained again.

A suite's `adopt_from` names output folders: the frontier suite's reference rows (layernorm, layerscale, ngpt) are
the modern folder's cells, under the same dataset, model and train sections (`Suite.recipe_hash`). A cell id and a
recipe fix what a cell trains (seed, data split, schedule), so the donor's record is this suite's result for that
cell on the donor's device (tests/sweep/test_adopt.py trains one both ways and compares). When a run queues a cell
(the matrix, a bracketing round, report seeds, the 2x check, a claim round) that a donor finished under this
recipe, the ledger adds the donor's record as finished: state, score, per-epoch values, result (device and
versions included), times, marked `adopted_from` (folder, study, trial). Bracketing, the report stage and the
claims read it as a cell trained here and queue what the donors lack; only that trains.

Refused before anything is written: a donor folder without a ledger, or one holding no study of this recipe (its
cells would mix recipes, as resuming a ledger of another recipe would). A donor is read once per process: cells it
finishes later are trained here, not waited for. Only `run`'s studies are donors and receivers: a tune's trials are
sampled configurations, not a grid's cells.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.names import (
    ADOPTED_ATTR,
    BRACKET,
    BUDGET,
    CHECKPOINT_ATTR,
    CLAIMS,
    REPORT,
    RUN,
    WEIGHTS_ATTR,
    OutputFolder,
    study_kind,
)
from normbench.contracts.suite import Suite
from normbench.errors import SuiteError
from normbench.store.ledger import Ledger
from normbench.store.migrations import trial_cell_id

ADOPTED = ADOPTED_ATTR  # user attr of a copied trial: {"folder", "study", "trial"} of the record it copies
DONOR_KINDS = (RUN, BRACKET, REPORT, BUDGET, CLAIMS)
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# the donor's bookkeeping, not the cell's result: its worker, its MLflow run, its attempts and files in its folder
NOT_COPIED = ("worker_lock", "worker_pid", "mlflow_run_id", "attempts", CHECKPOINT_ATTR, WEIGHTS_ATTR, "cell_id",
              "axes")


@dataclass
class Donors:
    """`cell_id -> (donor trial, the user attrs its copy keeps)` over the suite's `adopt_from` folders, first wins."""

    cells: dict[str, tuple[FrozenTrial, dict[str, Any]]] = field(default_factory=dict)

    def __call__(self, cell_id: str) -> tuple[FrozenTrial, dict[str, Any]] | None:
        return self.cells.get(cell_id)

    def holding(self, cell_ids: list[str] | set[str] | dict[str, Any]) -> set[str]:
        """Those of `cell_ids` a donor finished."""
        return {cid for cid in cell_ids if cid in self.cells}

    def sources(self, cell_ids: set[str]) -> str:
        """The donor folders of `cell_ids`, for a progress line."""
        return ", ".join(sorted({self.cells[cid][1][ADOPTED]["folder"] for cid in cell_ids if cid in self.cells}))


_LOADED: dict[tuple[str, ...], Donors] = {}


def donors_of(suite: Suite) -> Donors | None:
    """The suite's donors (None without `adopt_from`), read once per process; SuiteError names a folder that cannot
    give any of this recipe's cells and the fix."""
    if not suite.adopt_from:
        return None
    key = (os.getcwd(), suite.recipe_hash(), *suite.adopt_from)
    if key not in _LOADED:
        donors = Donors()
        for folder in suite.adopt_from:
            for cid, record in _finished_cells(suite, folder).items():
                donors.cells.setdefault(cid, record)
        _LOADED[key] = donors
    return _LOADED[key]


def _finished_cells(suite: Suite, folder: str) -> dict[str, tuple[FrozenTrial, dict[str, Any]]]:
    journal = OutputFolder(Path(folder)).ledger
    if not journal.is_file():
        raise SuiteError(f"{suite.path}: adopt_from: {folder} holds no ledger ({journal} is missing): train that "
                         "suite first, correct the path (it is read from the current directory, on every machine whose "
                         "workers queue this suite's cells), or drop it from adopt_from. Nothing was written.")
    ledger = Ledger(None, Path(folder))
    recipe, found = suite.recipe_hash(), set()
    cells: dict[str, tuple[FrozenTrial, dict[str, Any]]] = {}
    for name in ledger.study_names():
        if study_kind(name) not in DONOR_KINDS:
            continue
        study = ledger.study(name)
        found.add(study.user_attrs.get("recipe"))
        if study.user_attrs.get("recipe") != recipe:
            continue
        for trial in ledger.trials(study, FINISHED):
            if (cid := trial_cell_id(trial)) is not None and "axes" in trial.user_attrs:
                cells.setdefault(cid, (trial, copied_attrs(trial, folder, name)))
    if recipe not in found:
        held = ", ".join(sorted(str(r) for r in found)) or "none"
        raise SuiteError(f"{suite.path}: adopt_from: {folder} holds no cells of this suite's recipe {recipe} (its "
                         f"studies' recipes: {held}): its dataset, model or train section differs, so its cells are "
                         "not this suite's. Drop it from adopt_from. Nothing was written.")
    return cells


def copied_attrs(trial: FrozenTrial, folder: str, study: str) -> dict[str, Any]:
    """The user attrs a copy of `trial` keeps: its result, history and scores (and where it ran), not the donor's
    bookkeeping; plus where it came from."""
    kept = {k: v for k, v in trial.user_attrs.items() if k not in NOT_COPIED}
    return {**kept, ADOPTED: {"folder": folder, "study": study, "trial": trial.number}}
