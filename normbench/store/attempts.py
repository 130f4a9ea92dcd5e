"""The verdicts on attempts: which claim lost its worker, how the loss is counted, when a cell is failed for good.

A dead worker (its OS lock free on a journal, its heartbeat silent past the grace on a database) has its trial failed
and re-queued (store/ledger.py `requeue`), up to NORMBENCH_MAX_ATTEMPTS (default 3) lost attempts in a row, then
failed for good, so a cell that kills every worker (OOM, segfault) cannot walk the fleet; `normbench run
--retry-failed` gives it another round. An attempt lost after its checkpoint moved past where it started was
preempted while progressing (a spot instance, SLURM): kept apart (PREEMPTED), not counted, and it ends the row, so a
long cell preempted any number of times keeps resuming; a cell that dies at the same point every time writes no newer
checkpoint, and each of its attempts counts. Progress is bounded (a cell has so many steps), so every round ends. A
local worker's parent notes how it died (`note_worker_exit`), and each attempt's record carries that death once
someone counts it.
"""

from __future__ import annotations

import copy
import datetime
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.names import CHECKPOINT_ATTR, OutputFolder
from normbench.store.journal import lock_lost
from normbench.store.ledger import FAILED_FOR_GOOD, Ledger, ended_cells, worker_host
from normbench.store.locks import holder_dead

ATTEMPTS = "attempts"  # user attr: this round's attempts that lost their worker (who, where, why), oldest first
WORKER_EXIT = "worker_exit:"  # study user attr `worker_exit:<host>:<pid>`: how a local worker died, as its parent saw
RETRY_ROUND = "retry_round"  # user attr: how many times `--retry-failed` gave the cell another round
PREEMPTED = "preempted"  # user attr: this round's lost attempts that moved the checkpoint on: not counted


def reclaim(ledger: Ledger, study: optuna.Study) -> list[FrozenTrial]:
    """Fail and re-queue dead workers' trials (for good after `max_attempts`); returns them (to close their MLflow
    runs). Each worker-loop turn starts here: a run whose journal lock was taken over stops: LedgerLockLostError."""
    if (lost := lock_lost(ledger.storage)) is not None:
        raise lost
    failed: list[FrozenTrial] = []
    running = ledger.trials(study, (TrialState.RUNNING,))
    for t in running:
        # journal claims only (a database's tell by their heartbeat), and signed ones: the lock of a claim whose pid
        # is not written yet may be the one an older ledger's copy inherited from a dead attempt
        lock = t.user_attrs.get("worker_lock") if "worker_pid" in t.user_attrs else None
        dead = lock is not None and not ledger.heartbeats and holder_dead(
            Path(ledger.url).parent / OutputFolder.LOCKS / lock)
        if dead or _never_owned(t, ledger.grace_period):
            trial_id = ledger.call(ledger.ids.of, study, t.number)
            if not dead and _signed_since(ledger, trial_id):
                continue  # its worker signed after the snapshot above (a slow claim on a busy machine): it owns it
            with ledger.queue_guard(study.study_name):  # the FAIL and its copy land as one to a worker queueing
                if ledger.fail_trial(trial_id):  # only the FAIL that lands counts
                    verdict = (f"its worker process ended mid-cell (OS lock {lock} found free): killed (OOM killer, "
                               "SIGKILL, a watchdog), crashed (segfault) or exited") if dead else (
                        "claimed, but its worker never signed it (killed between claiming and starting the cell)")
                    _count_lost_attempt(ledger, study, t, verdict)
                    failed.append(t)
    if ledger.heartbeats and not _beats_may_be_missing(ledger):
        with ledger.queue_guard(study.study_name):
            failed += _fail_stale(ledger, study, running)
    return failed


def _fail_stale(ledger: Ledger, study: optuna.Study, running: list[FrozenTrial]) -> list[FrozenTrial]:
    """Fail and count RUNNING trials whose heartbeat stopped (those whose FAIL of ours landed; after a retry, one gone
    RUNNING -> FAIL with no error, re-queued by nobody, is one whose answer was lost)."""
    assert ledger.outage is not None
    errors = ledger.outage.errors
    stale = ledger.fail_stale(study)
    if ledger.outage.errors != errors:
        now = {t.number: t for t in ledger.trials(study)}
        requeued = {n for t in now.values() for n in t.system_attrs.get("retry_history", [])}
        stale += [now[t.number] for t in running if t.number not in requeued | {s.number for s in stale}
                  and now[t.number].state == TrialState.FAIL and "error" not in now[t.number].user_attrs]
    for t in stale:
        _count_lost_attempt(ledger, study, t, f"no heartbeat for over {ledger.grace_period} s: its worker died "
                            "(killed, crashed), hung, or lost the network")
    return stale


def _beats_may_be_missing(ledger: Ledger) -> bool:
    """Beats missed while the ledger was down say nothing of their worker: judge no peer stale for one grace after an
    outage that could age a live peer's last beat past the grace (its length as measured here, plus up to two beat
    intervals: one before this process noticed it, one before the peer's next beat landed)."""
    outage = ledger.outage
    assert outage is not None
    return (outage.back_within(ledger.grace_period)
            and outage.down_for + 2 * ledger.heartbeat_interval >= ledger.grace_period)


def _count_lost_attempt(ledger: Ledger, study: optuna.Study, lost: FrozenTrial, verdict: str) -> None:
    """Record a lost attempt on the cell's next trial: a WAITING copy or, after `max_attempts` in a row, a FAIL record
    never queued again. An unsigned claim is re-queued uncounted: its cell never ran, so killed nothing. One whose
    checkpoint moved on is re-queued uncounted too (PREEMPTED), and the row starts again: it was progressing."""
    if "worker_pid" not in lost.user_attrs:
        ledger.requeue(study, lost)
        return
    exits = ledger.call(worker_exits, study)
    if (moved := checkpoint_moved(lost, _started_from(ledger, study, lost))) is not None:
        record = attempt_record(lost, f"{verdict}; its checkpoint moved on ({moved}): preempted while progressing, "
                                "not counted", exits)
        ledger.requeue(study, lost, {PREEMPTED: [*lost.user_attrs.get(PREEMPTED, []), record]}, drop=(ATTEMPTS,))
        return
    attempts = [*lost.user_attrs.get(ATTEMPTS, []), attempt_record(lost, verdict, exits)]
    if len(attempts) < ledger.max_attempts:
        ledger.requeue(study, lost, {ATTEMPTS: attempts})
    else:
        ledger.requeue(study, lost, {ATTEMPTS: attempts, FAILED_FOR_GOOD: True}, state=TrialState.FAIL)


def retry_failed(ledger: Ledger, study: optuna.Study) -> list[str]:
    """Give the cells failed for good another round (`normbench run --retry-failed`); returns their ids. Earlier rounds
    stay in the ledger. Retried whole through an outage: a try skips what an earlier one queued."""
    def retry() -> list[str]:
        retried = []
        for record in ended_cells(study):
            ledger.requeue(study, record, {RETRY_ROUND: record.user_attrs.get(RETRY_ROUND, 0) + 1},
                           drop=(ATTEMPTS, PREEMPTED, FAILED_FOR_GOOD))
            retried.append(record.user_attrs.get("cell_id", f"trial {record.number}"))
        return retried

    return ledger.call(retry)


def checkpoint_moved(lost: FrozenTrial, started: FrozenTrial | None) -> str | None:
    """'epoch 3 to epoch 6' when the lost attempt's checkpoint record (CHECKPOINT_ATTR, sweep/checkpoints.py) stands
    past the one it started from (that of `started`, the trial it was queued from; none: from scratch), by optimizer
    step; else None: no checkpoint written, or none past the start (a cell that dies at the same point, one whose
    checkpoint was set aside and that started over, or one stopped before its first step)."""
    end = lost.user_attrs.get(CHECKPOINT_ATTR) or {}
    start = (started.user_attrs.get(CHECKPOINT_ATTR) or {}) if started is not None else {}
    if end.get("step") is None or end["step"] <= (start.get("step") or 0):
        return None
    return f"{_checkpoint_at(start) if start else 'the start'} to {_checkpoint_at(end)}"


def _checkpoint_at(record: dict[str, Any]) -> str:
    return f"epoch {record.get('epoch')}" + (f", batch {record['batch']}" if record.get("batch") else "")


def _started_from(ledger: Ledger, study: optuna.Study, lost: FrozenTrial) -> FrozenTrial | None:
    """The trial `lost` was queued as a copy of (store/ledger.py `requeue`: its checkpoint record is where `lost`
    started), or None: the cell's first trial, or queued afresh (`enqueue`)."""
    history = lost.system_attrs.get("retry_history") or []
    if not history:
        return None
    return ledger.call(ledger.storage.get_trial, ledger.call(ledger.ids.of, study, history[-1]))


def attempt_record(lost: FrozenTrial, verdict: str, exits: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """An attempt's record (trial, host, pid, verdict, start, noticer, MLflow run) and its death if noted (`exits`)."""
    started = lost.datetime_start.isoformat(timespec="seconds") if lost.datetime_start else None
    record = {"trial": lost.number, "host": lost.user_attrs.get("worker_host"),
              "pid": lost.user_attrs.get("worker_pid"), "verdict": verdict, "started": started,
              "noticed_by": f"{worker_host()} pid {os.getpid()}", "mlflow_run_id": lost.user_attrs.get("mlflow_run_id")}
    return with_exit(record, exits or {})


def note_worker_exit(study: optuna.Study, host: str, pid: int, seen: dict[str, Any]) -> None:
    """Keep how a local worker died (`seen`) on the study: a peer may count its attempts before its parent looks."""
    study.set_user_attr(f"{WORKER_EXIT}{host}:{pid}", seen)


def worker_exits(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """`{"host:pid": how it died}` of the local workers whose parent noted their death (`note_worker_exit`)."""
    return {k[len(WORKER_EXIT):]: v for k, v in study.user_attrs.items() if k.startswith(WORKER_EXIT)}


def with_exit(attempt: dict[str, Any], exits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The attempt plus its worker's noted death (exit, exit_code, stderr, node), once; verdict ends with the exit."""
    seen = exits.get(f"{attempt.get('host')}:{attempt.get('pid')}")
    if not seen or "exit" in attempt:
        return attempt
    return {**attempt, **seen, "verdict": f"{attempt.get('verdict', '?')}; {seen.get('exit', '?')}"}


def failed_for_good(study: optuna.Study) -> list[FrozenTrial]:
    """The FAIL records of the cells failed for good (store/ledger.py `ended_cells`), their attempts with their
    worker's death if noted after the record was written (on copies: the study's cached trials stay as they are)."""
    records = ended_cells(study)
    exits = worker_exits(study) if records else {}
    if not exits:
        return records
    merged = []
    for t in records:
        t = copy.copy(t)
        t.user_attrs = {**t.user_attrs, ATTEMPTS: [with_exit(a, exits) for a in t.user_attrs.get(ATTEMPTS, [])]}
        merged.append(t)
    return merged


def _signed_since(ledger: Ledger, trial_id: int) -> bool:
    """Whether the trial, read again now, is signed or no longer RUNNING: an unsigned claim judged from an older
    read must not be failed once its worker has signed it (that worker would train, or die of, a cell re-queued
    beside it)."""
    fresh = ledger.call(ledger.storage.get_trial, trial_id)
    return fresh.state != TrialState.RUNNING or "worker_pid" in fresh.user_attrs


def _never_owned(trial: FrozenTrial, grace_seconds: float) -> bool:
    """A RUNNING trial unsigned for over `grace_seconds` (NORMBENCH_HEARTBEAT_GRACE): its worker died before signing."""
    if "worker_pid" in trial.user_attrs or trial.datetime_start is None:
        return False
    return (datetime.datetime.now() - trial.datetime_start).total_seconds() > grace_seconds
