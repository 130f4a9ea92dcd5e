"""How a claimed cell's attempt ends for a worker, alone or in a fused group (sweep/worker.py, sweep/group_run.py):
trained, failed, or lost to another worker; given back on the way out (Ctrl-C, SIGTERM, a full disk); its MLflow
run closed in the state the ledger records."""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from normbench.contracts.results import EpochRecord
from normbench.errors import ClaimLostError, NormbenchError
from normbench.store import reserve
from normbench.store.claim import Claim
from normbench.store.journal import LedgerWriteError
from normbench.sweep.progress import Progress
from normbench.tracking.tracker import Tracker

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
TRAINED, FAILED, LOST = "trained", "failed", "lost"  # how a claimed cell ended for this worker


def replay(history: list[EpochRecord], claim: Claim, run_id: str, tracker: Tracker, progress: Progress) -> None:
    """Log a resumed cell's earlier epochs again, so this attempt's MLflow run and trial curve (pruner) are whole."""
    for record in history:
        tracker.log_epoch(run_id, record)
        progress.epoch(record)
        try:
            claim.report(record["val_top1"], record["step"])
        except ClaimLostError:  # taken over meanwhile: the first epoch's call stops the cell
            return


def ledger_state(result: Any) -> str:
    """The trial state the ledger records for `result` (the run's `ledger_state` tag)."""
    return TrialState.PRUNED.name if result.status == "pruned" else TrialState.COMPLETE.name


def release(claim: Claim, run_id: str, tracker: Tracker) -> None:
    """Give a claimed cell back on the way out (Ctrl-C, SIGTERM, a full disk, a ledger outage past the budget): trial
    re-queued, then run KILLED (the ledger first: on a full disk, the room the reserve freed is the ledger's). Best
    effort: the ledger that stopped us may be the one we cannot tell."""
    give_back(claim)
    tracker.fail(run_id, "KILLED")


def give_back(claim: Claim) -> None:
    """`release` of a claim whose run has not started: the trial back in the queue, no attempt counted."""
    for last in (False, True):
        try:
            claim.release()
            break
        except LedgerWriteError as e:  # the disk refused it: free the give-back's own reserve, then once more
            if not last and claim.ledger.journal is not None:
                reserve.free_last(Path(claim.ledger.journal.path).parent)
            if last:
                print(f"normbench: warning: could not give trial {claim.number} back to the queue ({e}); it stays "
                      "RUNNING in the ledger until the next run takes it over (at once: its lock is free once "
                      "this process ends)", file=sys.stderr)
        except Exception:  # the ledger is away: the heartbeat (database) or the lock (journal) frees the cell instead
            break


@contextmanager
def given_back_on_stop(claims: list[Claim]) -> Iterator[list[Claim]]:
    """A worker's turn, from claiming its cells to training them: on a stop anywhere in it (Ctrl-C, SIGTERM, or a
    NormbenchError: the ledger or the disk failing), every claim in `claims` (the turn adds to the list as it claims
    more) goes back to the queue uncounted. One already trained, recorded, given back or taken over is left as it is
    (its FAIL does not land; `Claim.release` acts once). A crash is left to `reclaim`, which counts it as an attempt."""
    try:
        yield claims
    except (KeyboardInterrupt, NormbenchError):
        for claim in claims:
            try:
                give_back(claim)
            except Exception as e:  # the ledger that stopped the turn may refuse this too: the others still go back
                print(f"normbench: warning: could not give trial {claim.number} back to the queue ({e}); the next "
                      "run's reclaim does", file=sys.stderr)
        raise


def settle(claim: Claim, run_id: str, tracker: Tracker) -> None:
    """Stopped between training and closing the run: close it FINISHED if the ledger has the cell, else `release`."""
    try:
        state = claim.frozen().state
    except Exception:  # the ledger is away: give the cell back; it runs again if it was not recorded
        state = TrialState.RUNNING
    if state in (TrialState.COMPLETE, TrialState.PRUNED):
        tracker.close(run_id, state.name)
    else:
        release(claim, run_id, tracker)


def lost_claim(cell_id: str, run_id: str, tracker: Tracker, progress: Progress) -> str:
    tracker.fail(run_id, "KILLED")  # never FINISHED, never FAILED-with-status-ok
    progress.forget(cell_id)
    progress.note(f"cell {cell_id}: another worker took it over while this one was stalled or cut off from the "
                  "ledger; stopped it here (it is recorded once, by that worker)")
    return LOST

