"""Ledgers written by an older normbench, read by this one: every legacy record shape is interpreted here, once.

Nothing is rewritten in place: Optuna cannot change a finished trial, and reading a published folder must not write
to it. The steps are applied as a ledger's trials are read, oldest first; a reader that calls these functions sees
every trial in the current format.

- version 1: a cell's axes lived only in the trial's params (no `axes` user attr); its `cell_id` listed the axes in
  the suite's order (`lr=0.001,depth=2`).
- version 2: `axes` is a user attr and ids sort the axes by name (spec/suite.py `cell_id`), so reordering a suite's
  keys keeps every id. A version-1 id is recomputed from the axes.
- version 3: results carry `val_top1`/`test_top1` (the test split). A version-2 result has only `best_val_top1`;
  spec/selection.py reads it as legacy (select and score both the best-epoch val) and the report says so.
- version 4: claims on a journal ledger name the claimer's OS lock (`worker_lock`); a version-3 claim has only host
  and pid, and store/ledger.py `reclaim` judges such a holder dead by its pid on the same host.
"""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from normbench.spec.suite import cell_id

LEDGER_VERSION = 4


def trial_axes(trial: FrozenTrial) -> dict[str, Any]:
    """The cell's axes (version 1: its params)."""
    return dict(trial.user_attrs.get("axes") or trial.params)


def trial_cell_id(trial: FrozenTrial) -> str | None:
    """The cell's id in the current format: recomputed from its axes (a version-1 id listed them unsorted); None for
    a trial that is no cell (a tuning slot)."""
    if "axes" in trial.user_attrs:
        return cell_id(trial.user_attrs["axes"])
    return trial.user_attrs.get("cell_id")
