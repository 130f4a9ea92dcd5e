"""Build a ledger from a folder's results.csv, for folders published before their ledger was kept:
`python scripts/import_results_csv.py results/depth-sweep-digits [...]` writes `<folder>/ledger.journal`.

Each CSV row becomes one finished trial of its study (run, bracketing round, report or budget, from its `role` and
`bracket_round`), numbered by its `trial` column (a number the CSV lacks, a failed attempt, is kept as a FAIL
placeholder so the numbers still match), with its axes as params, the selection rule's value, the summary its
columns hold as `result`, `imported_from: "results.csv"`, and the numeric scores. No per-epoch history was kept, so
each trial gets one intermediate value: its last finite val top-1 at the optimizer step it was reached (epochs x the
recipe's steps per epoch; a diverged cell's last epoch is the NaN one). A cell that diverged in its first epoch has
no finite val and so none. The journal is written beside the folder's files, fsynced and renamed into place; an
existing ledger is never replaced.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.results import CellResult
from normbench.contracts.selection import BUDGETS, REPORTS, SELECTS, select_value
from normbench.contracts.suite import Suite, cell_id, load_suite
from normbench.store.migrations import OBJECTIVE_NAME, SCORE_ATTRS
from normbench.store.trial_params import axis_distributions, trial_params

SUMMARY = [f for f in CellResult.__dataclass_fields__ if f not in ("history", "telemetry")]
STATES = {"ok": TrialState.COMPLETE, "diverged": TrialState.COMPLETE, "pruned": TrialState.PRUNED}  # as Ledger.finish


def study_name(names: StudyNames, role: str, bracket_round: int) -> str:
    if role == REPORTS:
        return names.report
    if role == BUDGETS:
        return names.budget
    return names.bracket(bracket_round) if bracket_round else names.run


def native(value: Any) -> Any:
    """A CSV cell as JSON: numpy scalars as Python numbers, NaN as None (as CellResult.summary writes it)."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and not math.isfinite(value) else value


def steps_per_epoch(suite: Suite, axes: dict[str, Any], train_size: int) -> int:
    """As train/loop.py counts them (and report/leaderboard.py for histories without steps)."""
    train = suite.cell(axes).config.train
    return max(1, train_size // train.batch_size // train.grad_accum_steps)


def trial_of(suite: Suite, row: dict[str, Any], distributions: dict[str, Any]) -> optuna.trial.FrozenTrial:
    axes = {k: native(row[k]) for k in suite.matrix}
    if cell_id(axes) != row["cell_id"]:
        raise SystemExit(f"import: row {row['cell_id']!r}: its axes give the id {cell_id(axes)!r}")
    result = {k: native(row[k]) for k in SUMMARY if k in row}
    state = STATES.get(result["status"], TrialState.FAIL)
    values: dict[int, float] = {}
    last, epochs = result.get("final_val_top1"), result.get("epochs_run") or 0
    finite_epochs = epochs - (result["status"] == "diverged")  # the diverged epoch's val is NaN
    if state != TrialState.FAIL and finite_epochs > 0 and last is not None:
        values[finite_epochs * steps_per_epoch(suite, axes, int(result.get("train_size") or 0))] = float(last)
    return optuna.trial.create_trial(
        state=state, value=select_value(result) if state == TrialState.COMPLETE else None,
        params=trial_params(axes, distributions), distributions=distributions, intermediate_values=values,
        user_attrs={"cell_id": row["cell_id"], "axes": axes, "result": result, "imported_from": "results.csv",
                    **({name: rule(result) for name, rule in SCORE_ATTRS.items()} if state != TrialState.FAIL
                       else {})})


def placeholder(number: int) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={
        "imported_from": "results.csv", "imported_gap": f"trial {number} is not in results.csv (a failed attempt)"})


def import_folder(folder: Path) -> str:
    csv, ledger = folder / "results.csv", OutputFolder(folder).ledger
    if ledger.exists():
        raise SystemExit(f"import: {ledger} exists; it is the record, not results.csv (remove it to import again)")
    suite, frame = load_suite(folder / OutputFolder.SUITE), pd.read_csv(csv)
    if "tuned_params" in frame and frame["tuned_params"].notna().any():
        raise SystemExit(f"import: {csv} holds tuned re-runs; their search studies cannot be rebuilt from it")
    frame["role"] = frame["role"] if "role" in frame else SELECTS  # before roles, every cell chose its lr
    names = StudyNames(suite.name)
    frame["study"] = [study_name(names, r["role"], int(r["bracket_round"])) for r in frame.to_dict("records")]
    tmp = folder / f".{ledger.name}.import-{os.getpid()}"
    try:
        storage, counts = JournalStorage(JournalFileBackend(str(tmp))), []
        for name in sorted(set(frame["study"]), key=_study_order):
            rows = frame[frame["study"] == name].sort_values("trial").to_dict("records")
            study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
            study.set_user_attr("imported_from", "results.csv")
            study.set_metric_names([OBJECTIVE_NAME])
            distributions = axis_distributions([{k: native(r[k]) for k in suite.matrix} for r in rows])
            by_number = {int(r["trial"]): r for r in rows}
            for number in range(max(by_number) + 1):
                row = by_number.get(number)
                study.add_trial(trial_of(suite, row, distributions) if row else placeholder(number))
            counts.append(f"{name}: {len(rows)} cells" + (f" + {max(by_number) + 1 - len(rows)} gaps"
                                                         if len(rows) <= max(by_number) else ""))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, ledger)
    finally:
        for leftover in (tmp, Path(f"{tmp}.lock")):
            leftover.unlink(missing_ok=True)
    return f"{ledger}: {'; '.join(counts)}"


def _study_order(name: str) -> tuple[int, int]:
    """run, bracketing rounds in order, report, budget: the order a run creates them."""
    kind, _, rest = name.partition(":")
    tail = rest.rsplit(":", 1)[-1]
    return ({"run": 0, "bracket": 1, "report": 2, "budget": 3}[kind], int(tail) if tail.isdigit() else 0)


if __name__ == "__main__":
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # set_metric_names: stable
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/import_results_csv.py RESULTS_FOLDER [...]")
    for arg in sys.argv[1:]:
        print(import_folder(Path(arg)))
