"""Ledgers written by an older normbench, read by this one: every legacy record shape is interpreted here, once.

Reading rewrites nothing: Optuna cannot change a finished trial, and reading a published folder must not write to
it. The steps are applied as a ledger's trials are read, oldest first; a reader that calls these functions sees
every trial in the current format.

- version 1: a cell's axes lived only in the trial's params (no `axes` user attr); its `cell_id` listed the axes in
  the suite's order (`lr=0.001,depth=2`).
- version 2: `axes` is a user attr and ids sort the axes by name (contracts/suite.py `cell_id`), so reordering a suite's
  keys keeps every id. A version-1 id is recomputed from the axes.
- version 3: results carry `val_top1`/`test_top1` (the test split). A version-2 result has only `best_val_top1`;
  contracts/selection.py reads it as legacy (select and score both the best-epoch val) and the report says so.
- version 4: claims on a journal ledger name the claimer's OS lock (`worker_lock`). A version-3 claim (host and pid
  only) is a RUNNING trial of a run in progress; no ledger holds one any more (the published ones hold none), so its
  check is retired (git history keeps it).
- version 5: a finished trial carries its epochs as Optuna intermediate values (val top-1 at step = optimizer steps)
  and its scores as numeric user attrs `test_top1`/`val_top1` (SCORE_ATTRS), for optuna-dashboard's curves and
  sorting. A version-4 trial is read as it is (its `history` and `result` say everything normbench needs); only the
  dashboard shows no curve for it. Every published ledger was rewritten to version 5 by `normbench ledger upgrade`,
  retired once none was left to upgrade (git history, commit 3c8ec1b, keeps it).
"""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from normbench.contracts.selection import score_value, select_value
from normbench.contracts.suite import cell_id

OBJECTIVE_NAME = "val_top1_final_epoch"  # every study's objective (store/ledger.py `Ledger.study` names new ones)
SCORE_ATTRS = {"test_top1": score_value, "val_top1": select_value}  # numeric user attr -> its rule (store/claim.py)


def trial_axes(trial: FrozenTrial) -> dict[str, Any]:
    """The cell's axes (version 1: its params)."""
    return dict(trial.user_attrs.get("axes") or trial.params)


def trial_cell_id(trial: FrozenTrial) -> str | None:
    """The cell's id in the current format: recomputed from its axes (a version-1 id listed them unsorted); a tune
    search's slot (no axes: it samples them) keeps its own id, `slot-3`, so a restart does not queue it again."""
    if trial.user_attrs.get("axes"):
        return cell_id(trial.user_attrs["axes"])
    return trial.user_attrs.get("cell_id")

