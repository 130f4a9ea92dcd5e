"""A cell a worker holds: its trial, claimed from the ledger, until it is finished, failed or given back.

Every write goes through the claim, so a trial a peer took over (this worker stalled past the heartbeat grace) ends
the cell at the next write (ClaimLostError) instead of recording it twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.results import CellResult
from normbench.contracts.selection import select_value
from normbench.errors import ClaimLostError
from normbench.store.migrations import SCORE_ATTRS
from normbench.store.retry import NOT_LANDED, Outage


class Ledger(Protocol):
    """What a claim uses of its ledger (store/ledger.py, not imported: it imports this module)."""

    storage: Any
    heartbeats: bool
    heartbeat_interval: int
    outage: Outage | None

    def call(self, fn: Callable[..., Any], *args: Any, unsafe: bool = False,
             landed: Callable[[], Any] | None = None, **kwargs: Any) -> Any: ...

    def fail_trial(self, trial_id: int) -> bool: ...

    def requeue(self, study: optuna.Study, failed: FrozenTrial) -> None: ...

    def queue_guard(self, study_name: str) -> AbstractContextManager[None]: ...


@dataclass(eq=False)
class Claim:
    """Trial `trial` (storage id `id`) of `study`, held by this process in `ledger`."""

    ledger: Ledger
    study: optuna.Study
    trial: optuna.Trial
    id: int
    lost: bool = False  # another worker took it over (seen by the heartbeat or a refused write)
    failed_here: bool = False  # `release` failed the trial: a second call only queues it again
    requeued: bool = False  # `release` queued its copy: a later call (a stop's give-back of a whole turn) does nothing
    told: bool = False  # this worker's finish or fail landed: the trial is recorded, `release` leaves it

    @property
    def number(self) -> int:
        return self.trial.number

    @property
    def user_attrs(self) -> dict[str, Any]:
        """The trial's user attrs: the cell's id and axes, and what this worker wrote."""
        return self.trial.user_attrs

    def frozen(self) -> FrozenTrial:
        """The trial as the ledger holds it now (state, attrs, its place in `retry_history`)."""
        return self.ledger.call(self.ledger.storage.get_trial, self.id)

    def held(self, *, ask: bool = False) -> bool:
        """False once another worker took this trial over: from the heartbeat's last look, or now if `ask`."""
        if not self.lost and ask and self.frozen().state != TrialState.RUNNING:
            self.lost = True
        return not self.lost

    @contextmanager
    def owned(self) -> Iterator[None]:
        """Write to the trial; ClaimLostError (not Optuna's) if a peer failed it as stale meanwhile, at any stage."""
        try:
            yield
        except (UpdateFinishedTrialError, ValueError) as e:
            if isinstance(e, ValueError) and not str(e).startswith("Cannot tell a"):  # Study.tell's word for it
                raise
            self.lost = True
            raise ClaimLostError(f"trial {self.number} was taken over by another worker") from None

    def set_attr(self, key: str, value: Any) -> None:
        with self.owned():
            self.ledger.call(self.trial.set_user_attr, key, value)

    def report(self, value: float, step: int) -> None:
        """optuna-dashboard's curve and the pruner's input."""
        with self.owned():
            self.ledger.call(self.trial.report, value, step)

    def should_prune(self) -> bool:
        return self.ledger.call(self.trial.should_prune)

    def finish(self, result: CellResult) -> None:
        """Store the metrics (user attrs "result": `result.summary()`, "history": the epochs), then mark the trial
        COMPLETE or PRUNED. ClaimLostError if a peer took it over meanwhile (it trains the cell: no double record)."""
        summary = result.summary()
        self.set_attr("result", summary)
        self.set_attr("history", result.history_records())
        # numbers optuna-dashboard can show and sort by, as the leaderboard scores them (0 when diverged)
        for name, rule in SCORE_ATTRS.items():
            self.set_attr(name, rule(summary))
        if result.status == "pruned":
            self._tell(TrialState.PRUNED)
        else:  # the value `normbench tune` ranks by: the selection rule's, final-epoch val
            self._tell(TrialState.COMPLETE, select_value(summary))

    def fail(self, error: str) -> None:
        """The cell raised: record the error and fail the trial (the next run queues it again)."""
        self.set_attr("error", error[:1000])
        self._tell(TrialState.FAIL)

    def _tell(self, state: TrialState, value: float | None = None) -> None:
        def landed() -> Any:  # the answer was lost: is the trial already in `state` (with `value`)?
            now = self.frozen()
            return True if now.state == state and (value is None or now.values == [value]) else NOT_LANDED

        with self.owned():
            self.ledger.call(self.study.tell, self.trial, values=value, state=state, unsafe=True, landed=landed)
        self.told = True

    def release(self) -> None:
        """Give the trial back (Ctrl-C, SIGTERM, a full disk): failed here, queued again for the next run. Called
        again after it raised midway (a full disk frees room at its first refused write), it finishes the job; called
        again after it landed, or on a trial this worker recorded or lost, it does nothing (one copy in the queue,
        never two, and no write the ledger would refuse)."""
        if self.requeued or self.told or self.lost:
            return
        with self.ledger.queue_guard(self.study.study_name):  # the FAIL and its copy land as one (Ledger.queue_guard)
            if not self.failed_here:
                self.failed_here = self.ledger.fail_trial(self.id)
                if not self.failed_here:  # someone else already finished or failed it
                    return
            self.ledger.requeue(self.study, self.frozen())
            self.requeued = True

    @contextmanager
    def heartbeat(self) -> Iterator[None]:
        """Beat while the cell trains (database ledgers), so other machines can tell a live worker from a lost one."""
        ledger = self.ledger
        if not ledger.heartbeats:
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            # Its own rhythm, not the retries' backoff: after a blip the next beat must come within the grace, and a
            # failed beat must never end the thread (peers would take the live cell).
            missed_since: float | None = None  # monotonic time of the first failed beat of an outage
            while not stop.is_set():
                wait = float(ledger.heartbeat_interval)
                try:
                    if ledger.storage.get_trial(self.id).state != TrialState.RUNNING:  # failed as stale meanwhile
                        self.lost = True
                        return
                    ledger.storage.record_heartbeat(self.id)  # type: ignore[attr-defined]
                    if missed_since is not None and ledger.outage is not None:  # peers' beats were lost too
                        ledger.outage.came_back(time.monotonic() - missed_since)
                        missed_since = None
                except Exception:  # the database is away (or slow): try again soon, never give up while training
                    wait = min(wait, 0.5)
                    missed_since = time.monotonic() if missed_since is None else missed_since
                stop.wait(wait)

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
