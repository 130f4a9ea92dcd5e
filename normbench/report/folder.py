"""One output folder read back for reporting: its suite (from the folder's suite.yaml), its finished cells and the
`Analysis` of them. `normbench compare` reads several folders this way; the leaderboard writes one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.suite import Suite, load_suite
from normbench.errors import NormbenchError
from normbench.report.analysis import Analysis
from normbench.report.frames import cells_frame
from normbench.report.leaderboard import _analyse, _with_recipe_columns
from normbench.report.tune_frame import tune_cells, with_tuned_values
from normbench.store.ledger import Ledger


@dataclass
class FolderRead:
    path: Path
    suite: Suite
    cells: pd.DataFrame
    analysis: Analysis
    tuned: bool = False  # `normbench tune` wrote it: its scores are each row's tuned configuration's


def read_folder(out_dir: Path, *, storage: str | None = None) -> FolderRead:
    """The folder's suite, cells and analysis; a NormbenchError naming the fix when the folder cannot answer."""
    folder = OutputFolder(out_dir)
    if not folder.path.is_dir():
        raise NormbenchError(f"{out_dir}: no such folder; pass a suite's output folder, e.g. results/smoke")
    if not folder.suite.is_file():
        raise NormbenchError(f"{out_dir}: no {OutputFolder.SUITE} here; run the suite with `--out {out_dir}` first "
                             "(it copies the suite file there)")
    if storage is None and not folder.ledger.exists():
        raise NormbenchError(f"{out_dir}: no ledger here ({OutputFolder.LEDGER}); run the suite first, or pass "
                             "--storage if it ran on a shared database")
    suite = load_suite(folder.suite)
    ledger = Ledger(storage, folder.path)
    names = StudyNames(suite.name)
    cells = _with_recipe_columns(cells_frame(ledger, names, scope=MatrixScope(suite)), suite)
    tuned = False
    if cells.empty and suite.tune is not None:  # a folder `normbench tune` wrote: its searches and re-runs
        reruns = with_tuned_values(cells_frame(ledger, names, tuned=True))
        if not reruns.empty:
            cells, tuned = _with_recipe_columns(tune_cells(ledger, names, suite, reruns), suite), True
    if cells.empty:
        raise NormbenchError(f"{out_dir}: no finished cells yet; run (or resume) `normbench run {suite.path}` first")
    return FolderRead(folder.path, suite, cells, _analyse(cells, suite), tuned)


def folder_name(read: FolderRead, reads: Sequence[FolderRead]) -> str:
    """`read`'s folder as the tables name it: its last path part, or as many parts as tell it from the others'
    (`in-progress/frontier` beside `results/frontier`)."""
    parts = read.path.resolve().parts
    for n in range(1, len(parts) + 1):
        name = "/".join(parts[-n:])
        if all(r is read or "/".join(r.path.resolve().parts[-n:]) != name for r in reads):
            return name
    return str(read.path)
