"""The ledger read back as two DataFrames: one row per finished cell (`cells_frame`) and one row per epoch of each
cell (`history_frame`, written as history.csv so a clean clone can redraw every curve and recompute every
learning-speed number without the ledger). The cells failed for good (`failed_cells`) ride along in the cells
frame's `attrs`, for the leaderboard's section on them.
"""

from __future__ import annotations

import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.names import ADOPTED_ATTR, StudyNames
from normbench.contracts.selection import BUDGETS, REPORTS, ROLE, SELECTS, add_scores
from normbench.store.attempts import ATTEMPTS, RETRY_ROUND, failed_for_good
from normbench.store.ledger import Ledger
from normbench.store.migrations import trial_axes

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
HISTORY_COLUMNS = ("epoch", "step", "images", "train_loss", "val_top1", "lr_now", "grad_norm")
FAILED = "failed_for_good"  # the cells frame's attrs key: failed_cells()
LEFT_OUT = "left_out"  # the cells frame's attrs key: how many finished cells the edited matrix no longer lists


def studies_of(ledger: Ledger, names: StudyNames, *, tuned: bool = False) -> list[tuple[str, int, str]]:
    """(study, bracket round, role) of the suite's studies present in the ledger: the matrix and bracketing rounds
    select; the report stage reports; with `tuned`, the tuned re-runs (which report)."""
    present = set(ledger.study_names())
    if tuned:
        studies = [(names.tuned, 0, REPORTS)]
    else:
        studies = [(names.run, 0, SELECTS),
                   *((n, names.bracket_round(n) or 0, SELECTS) for n in names.bracket_rounds(present)),
                   (names.report, 0, REPORTS), (names.claims, 0, REPORTS), (names.budget, 0, BUDGETS)]
    return [s for s in studies if s[0] in present]


def cells_frame(ledger: Ledger, names: StudyNames, *, tuned: bool = False,
                scope: MatrixScope | None = None) -> pd.DataFrame:
    """One row per finished cell of the suite's run, bracketing and report studies (or, with `tuned`, of its tuned
    re-runs): axes, metrics, status, `role` (select/report) and `bracket_round` (0 outside bracketing). With `scope`
    (the suite as its file says now), only the cells it lists; attrs[LEFT_OUT] counts the others."""
    rows, left_out = [], 0
    for name, bracket_round, role in studies_of(ledger, names, tuned=tuned):
        for t in ledger.trials(ledger.study(name), FINISHED):
            if scope is not None and not scope.holds(name, trial_axes(t)):
                left_out += 1
                continue
            rows.append({"cell_id": t.user_attrs.get("cell_id"), **trial_axes(t), **t.user_attrs.get("result", {}),
                         ROLE: role, "trial": t.number, "bracket_round": bracket_round,
                         "tuned_params": t.user_attrs.get("overrides"), "history": t.user_attrs.get("history"),
                         **adopted_column(t)})
    frame = pd.DataFrame(rows)
    frame = frame if frame.empty else add_scores(frame)
    frame.attrs[FAILED] = failed_cells(ledger, names, tuned=tuned, scope=scope)  # not rows: they have no metrics
    frame.attrs[LEFT_OUT] = left_out
    return frame


def adopted_column(trial: FrozenTrial) -> dict[str, str]:
    """`{"adopted_from": folder}` for a cell copied from another folder's ledger (sweep/adopt.py), else nothing: a
    folder without such cells keeps its columns."""
    source = trial.user_attrs.get(ADOPTED_ATTR)
    return {ADOPTED_ATTR: str(source.get("folder"))} if isinstance(source, dict) else {}


def failed_cells(ledger: Ledger, names: StudyNames, *, tuned: bool = False,
                 scope: MatrixScope | None = None) -> list[dict]:
    """The suite's cells failed for good (each attempt of their last round killed its worker): cell_id, study,
    retry_round and `attempts` (per attempt: trial, host, pid, verdict, started, noticed_by, mlflow_run_id)."""
    return [{"cell_id": t.user_attrs.get("cell_id", f"trial {t.number}"), "study": name,
             "retry_round": t.user_attrs.get(RETRY_ROUND, 0), "attempts": t.user_attrs.get(ATTEMPTS, [])}
            for name, _, _ in studies_of(ledger, names, tuned=tuned) for t in failed_for_good(ledger.study(name))
            if scope is None or scope.holds(name, trial_axes(t))]


def history_frame(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (cell, epoch) of `cells` (a cells_frame with its `history` column): cell_id, role, `keys` (the
    axes), then HISTORY_COLUMNS. `lr_now` is the schedule's lr at the epoch's last step (`lr` is the cell's peak).
    Histories written before `step` and `images` were recorded get them from the split size and the recipe
    (`steps_per_epoch`, a column of `cells` the caller fills), as the loop counts them."""
    rows = []
    for _, cell in cells.iterrows():
        per_epoch = cell.get("history")
        if not isinstance(per_epoch, list):
            continue
        steps = cell.get("steps_per_epoch")
        for record in per_epoch:
            epoch = int(record["epoch"])
            step = record.get("step", (epoch + 1) * steps if steps else None)
            rows.append({"cell_id": cell["cell_id"], ROLE: cell[ROLE], **{k: cell[k] for k in keys},
                         "epoch": epoch, "step": step, "images": record.get("images"),
                         "train_loss": record.get("train_loss"), "val_top1": record.get("val_top1"),
                         "lr_now": record.get("lr"), "grad_norm": record.get("grad_norm")})
    frame = pd.DataFrame(rows, columns=["cell_id", ROLE, *keys, *HISTORY_COLUMNS])
    return frame.astype({"val_top1": float, "train_loss": float})
