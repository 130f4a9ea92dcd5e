"""Which cells exist, who runs them, which finished: an Optuna storage, one trial per cell.

Locally the ledger is a journal file in the output folder (safe for many processes on one machine); with
`--storage postgresql://...` it is a shared database for workers on many machines. A cell is a WAITING trial until
a worker claims it (atomically: Optuna's WAITING -> RUNNING transition), then COMPLETE (or PRUNED). A worker that
dies mid-cell is noticed two ways: on a journal file, the OS lock its process held is free (whatever its host name
or pid); on a database, its heartbeat stops for longer than the grace period. Either way the trial is failed and a
WAITING copy is queued, so the cell runs again, up to NORMBENCH_MAX_ATTEMPTS (default 3) attempts in a row that
each lost their worker: then the cell is failed for good (a FAIL record with the attempts' hosts, pids and verdicts),
so a cell that kills every worker (OOM, segfault) cannot walk through the fleet; `normbench run --retry-failed`
gives it another round. A database outage is waited out (normbench.store.retry); a worker whose
claim was taken while it was stalled or cut off stops that cell (`claim_held`) instead of finishing it twice.
"""

from __future__ import annotations

import copy
import datetime
import os
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from normbench import settings
from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.results import CellResult
from normbench.contracts.selection import score_value, select_value
from normbench.errors import ClaimLostError, NormbenchError, ServerUnreachableError
from normbench.store.journal import SafeJournalFileBackend, lock_lost
from normbench.store.locks import LifeLock, holder_dead
from normbench.store.migrations import legacy_claim_verdict, trial_cell_id
from normbench.store.optuna_api import RDB_RETRIED, TrialIds
from normbench.store.queue_lock import queue_lock
from normbench.store.retry import Outage, raw, redact, retrying
from normbench.store.trial_params import add_waiting_trial, axis_distributions

WORKER_ATTRS = ("worker_host", "worker_pid", "mlflow_run_id")
UNFINISHED = (TrialState.WAITING, TrialState.RUNNING)
LIVE = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED)
ATTEMPTS = "attempts"  # user attr: this round's attempts that lost their worker (who, where, why), oldest first
FAILED_FOR_GOOD = "failed_for_good"  # user attr of the FAIL record that ends a cell's round: not queued again
WORKER_EXIT = "worker_exit:"  # study user attr `worker_exit:<host>:<pid>`: how a local worker died, as its parent saw
SUITE = "suite"  # study user attr: the suite whose workers may claim its cells (with "recipe", the recipe hash)
RETRY_ROUND = "retry_round"  # user attr: how many times `--retry-failed` gave the cell another round
optuna.logging.set_verbosity(optuna.logging.WARNING)


def worker_host() -> str:
    """This machine's name in the ledger; NORMBENCH_HOST overrides it (containers that share a hostname)."""
    return settings.current().host


def max_attempts_from_env() -> int:
    """NORMBENCH_MAX_ATTEMPTS (default 3): attempts in a row a cell may lose its worker before it is failed for good."""
    return settings.current().max_attempts


def engine_kwargs(url: str, grace_period: int) -> dict[str, Any]:
    """SQLAlchemy engine options for a ledger database. On PostgreSQL a worker stopped (SIGSTOP, a frozen VM)
    inside a transaction would hold its row locks and block every peer: the server ends such a session after the
    grace, and the worker retries. Other databases (SQLite) take no such option."""
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        kwargs["connect_args"] = {"options": f"-c idle_in_transaction_session_timeout={grace_period * 1000}"}
    return kwargs


class Ledger:
    """The record of cells. `url=None` keeps it in `<out_dir>/ledger.journal`."""

    def __init__(self, url: str | None, out_dir: Path, *, heartbeat_interval: int | None = None,
                 grace_period: int | None = None, max_attempts: int | None = None) -> None:
        """Heartbeat every `heartbeat_interval` s (NORMBENCH_HEARTBEAT_INTERVAL, default 10); a shared-database
        worker silent for `grace_period` s (NORMBENCH_HEARTBEAT_GRACE, default 60) is taken for lost; a cell whose
        `max_attempts` attempts in a row (NORMBENCH_MAX_ATTEMPTS, default 3) lost their worker is failed for good.
        `self.url` names the ledger in messages: a database URL's password is masked there."""
        configured = settings.current()
        heartbeat_interval = heartbeat_interval or configured.heartbeat_interval
        grace_period = grace_period or configured.heartbeat_grace
        self.url = redact(url) if url else str(OutputFolder(out_dir).ledger)
        self._owner: tuple[str, str] | None = None  # (suite, recipe hash) this process works for: `serve`
        self.heartbeat_interval, self.grace_period = heartbeat_interval, grace_period
        self.max_attempts = max_attempts or max_attempts_from_env()
        self._stale: list[FrozenTrial] = []
        self._life: LifeLock | None = None  # journal ledgers: held while this process lives, named by its claims
        self._lost: set[int] = set()  # trial ids whose claim another worker took (seen by the heartbeat)
        if url is None or "://" not in url:
            Path(self.url).parent.mkdir(parents=True, exist_ok=True)
            self.journal: SafeJournalFileBackend | None = SafeJournalFileBackend(self.url)
            self.storage: optuna.storages.BaseStorage = optuna.storages.JournalStorage(self.journal)
            self.ids, self.heartbeats = TrialIds(self.storage), False
            return
        self.journal = None
        if url.startswith(("postgresql://", "postgres://")):
            # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; normbench ships psycopg2-binary
            url = "postgresql+psycopg2://" + url.split("://", 1)[1]
        self.outage = Outage(f"the ledger database {redact(self.url)}")
        error: Exception | None = None
        for attempt in range(3):
            try:
                self.storage = retrying(optuna.storages.RDBStorage(
                    url, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                    heartbeat_stale_trial_callback=self._on_stale, engine_kwargs=engine_kwargs(url, grace_period)),
                    what=self.outage.what, outage=self.outage, private=RDB_RETRIED)
                error = None
                break
            except Exception as e:  # sqlalchemy raises many types; all mean "cannot use this URL"
                error = e
                if "already exists" not in str(e):
                    break
                time.sleep(1.0 + attempt)  # workers racing to create the schema on a new database: retry
        if error is not None:
            raise ServerUnreachableError(
                f"cannot open the ledger database {redact(self.url)}: {type(error).__name__}: "
                f"{str(error).splitlines()[0]}\nCheck that the server is running and reachable, and the user, "
                "password and database exist (e.g. `createdb normbench`). Nothing finished is lost: results already "
                "in the ledger stay there."
            ) from None
        self.ids, self.heartbeats = TrialIds(self.storage), True

    # ------------------------------------------------------------------------------------------------ studies

    def serve(self, suite: str, recipe: str) -> None:
        """This process works for `suite` with that recipe hash: the studies it creates are stamped with both, and
        every claim checks its study still carries them (a shared database holds other suites' studies)."""
        self._owner = (suite, recipe)

    def study(self, name: str, **kwargs: Any) -> optuna.Study:
        """Study `name`, created when missing (stamped with the suite served, if any). An existing one is loaded
        without a write (create_study appends a record to the journal even when the study exists, and workers look
        their studies up in a loop)."""
        try:
            study = optuna.load_study(study_name=name, storage=self.storage, **kwargs)
        except KeyError:
            study = optuna.create_study(study_name=name, storage=self.storage, load_if_exists=True,
                                        direction="maximize", **kwargs)
            if self._owner is not None and SUITE not in study.user_attrs:
                study.set_user_attr(SUITE, self._owner[0])
                study.set_user_attr("recipe", self._owner[1])
        if study.metric_names is None:  # optuna-dashboard's name for the objective (else "Objective 0")
            with warnings.catch_warnings():  # "set_metric_names is experimental": stable since Optuna 3.2
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(["val_top1_final_epoch"])
        return study

    def study_names(self) -> list[str]:
        return [s.study_name for s in optuna.get_all_study_summaries(self.storage, include_best_trial=False)]

    def enqueue(self, study: optuna.Study, items: dict[str, dict[str, Any]],
                extra: dict[str, dict[str, Any]] | None = None) -> int:
        """Queue each `cell_id -> axes` that has no live trial yet (with `extra[cell_id]` as further user attrs);
        returns how many were queued."""
        # ids in the current format: a ledger written before ids sorted their axes is not queued twice; a cell failed
        # for good stays out of the queue until `--retry-failed` (else every starting worker would feed it again)
        with queue_lock(self.storage, getattr(self, "outage", None), study.study_name, self.grace_period):
            present = {trial_cell_id(t) for t in study.get_trials(deepcopy=False, states=LIVE)}
            present |= {trial_cell_id(t) for t in failed_for_good(study)}
            missing = {cid: axes for cid, axes in items.items() if cid not in present}
            queued = [t.user_attrs.get("axes") or {} for t in study.get_trials(deepcopy=False)]
            distributions = axis_distributions([*queued, *missing.values()])  # the axes as params, for the dashboard
            for cid, axes in missing.items():
                add_waiting_trial(study, axes, distributions,
                                  user_attrs={"cell_id": cid, "axes": axes, **(extra or {}).get(cid, {})})
        return len(missing)

    # ---------------------------------------------------------------------------------------------- claiming

    def claim(self, study: optuna.Study) -> optuna.Trial | None:
        """Take one WAITING trial for this process, or None when none is left. Raises NormbenchError if the study
        is no longer the served suite's (see `serve`)."""
        for i, frozen in enumerate(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))):
            if i == 0:  # once per claim that finds work, not on every idle poll
                self._check_owner(study)
            try:
                trial_id = self.ids.of(study, frozen.number)
                if not self.storage.set_trial_state_values(trial_id, state=TrialState.RUNNING):
                    continue  # another worker took it first
            except UpdateFinishedTrialError:
                continue
            if self.heartbeats:  # beat at once: a worker lost before its cell's heartbeat thread starts is still seen
                self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
            trial = optuna.Trial(study, trial_id)
            try:
                with self.owned(trial):
                    self._sign(trial)
                    if self._duplicate(study, frozen):
                        study.tell(trial, state=TrialState.FAIL)
                        continue
            except ClaimLostError:  # stalled past the grace while signing: a peer failed and re-queued it
                continue
            return trial
        return None

    def _check_owner(self, study: optuna.Study) -> None:
        """The study belongs to the suite and recipe this process serves, by its stamp (read afresh: a study
        replaced mid-run by another team's is caught at the next claim) or, unstamped, by its name."""
        if self._owner is None:
            return
        suite, recipe = self._owner
        attrs = study.user_attrs
        theirs = attrs.get(SUITE) or (suite if _named_for(study.study_name, suite) else None)
        if theirs != suite or attrs.get("recipe", recipe) != recipe:
            raise NormbenchError(
                f"the ledger {self.url}: study `{study.study_name}` belongs to suite `{theirs or '?'}` with recipe "
                f"{attrs.get('recipe', '?')}, not to `{suite}` with recipe {recipe}; this worker claims nothing from "
                "it. Check --storage (each team or suite family its own database: docs/cluster.md), or give the "
                "suite another name.")

    def _sign(self, trial: optuna.Trial) -> None:
        """Write who holds the trial, so peers can tell a dead holder from a live one."""
        if not self.heartbeats:  # a journal file: peers tell this process alive by its OS lock
            self._life = self._life or LifeLock(Path(self.url).parent)
            trial.set_user_attr("worker_lock", self._life.path.name)
        trial.set_user_attr("worker_host", worker_host())
        trial.set_user_attr("worker_pid", os.getpid())

    def _duplicate(self, study: optuna.Study, claimed: FrozenTrial) -> bool:
        """Two workers can queue the same cell at once. The copy that runs is the lowest-numbered one not failed:
        a claimed copy is dropped if the cell is finished or a lower-numbered copy is running or waiting. The rule
        is asymmetric on purpose: two workers that claim two copies at the same moment must not both drop theirs
        (a symmetric "another copy is running" lost the cell), nor both keep them."""
        cid = claimed.user_attrs.get("cell_id")
        if cid is None:
            return False
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING,
                                                          TrialState.COMPLETE, TrialState.PRUNED)):
            if t.user_attrs.get("cell_id") != cid or t.number == claimed.number:
                continue
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or t.number < claimed.number:
                return True
        return False

    def reclaim(self, study: optuna.Study) -> list[FrozenTrial]:
        """Fail and re-queue the trials of dead workers (or fail them for good after `max_attempts`); returns them
        (so their MLflow runs can be closed). Each turn of the worker loop starts here: a run whose journal lock was
        taken over meanwhile stops here (LedgerLockLostError), its last cell recorded and closed."""
        if (lost := lock_lost(self.storage)) is not None:
            raise lost
        failed: list[FrozenTrial] = []
        host = worker_host()
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            lock = t.user_attrs.get("worker_lock")
            if lock is not None:  # its OS lock: free means dead, whatever host or pid it had
                dead = not self.heartbeats and holder_dead(Path(self.url).parent / OutputFolder.LOCKS / lock)
                verdict = (f"its worker process ended mid-cell (OS lock {lock} found free): killed (OOM killer, "
                           "SIGKILL, a watchdog), crashed (segfault) or exited")
            else:  # a claim from before worker_lock (store/migrations.py, version 3)
                verdict = legacy_claim_verdict(t, host, pid_alive, None if self.heartbeats else self.grace_period)
                dead = verdict is not None
            if dead or _never_owned(t, self.grace_period):
                if self._fail(self.ids.of(study, t.number)):  # only the process whose FAIL lands counts the attempt
                    self._count_lost_attempt(study, t, verdict if dead else "claimed, but its worker never signed "
                                             "it (killed between claiming and starting the cell)")
                    failed.append(t)
        if self.heartbeats and not self._beats_may_be_missing():
            self._stale = []
            optuna.storages.fail_stale_trials(study)  # calls _on_stale for each
            failed += self._stale
        return failed

    def _beats_may_be_missing(self) -> bool:
        """A heartbeat missed while the ledger itself was down says nothing about its worker. For one grace after
        an outage long enough to make a live peer's last beat look older than the grace (its length as this process
        measured it, plus up to two beat intervals: one before this process noticed it, one before the peer's next
        beat landed), no peer is judged stale. A shorter blip (a dropped session, a quick restart) cannot have."""
        outage = self.outage
        return (outage.back_within(self.grace_period)
                and outage.down_for + 2 * self.heartbeat_interval >= self.grace_period)

    def _on_stale(self, study: optuna.Study, trial: FrozenTrial) -> None:
        # Optuna calls this only in the process whose FAIL of the stale trial landed: one count per lost attempt
        self._count_lost_attempt(study, trial, f"no heartbeat for over {self.grace_period} s: its worker died "
                                 "(killed, crashed), hung, or lost the network")
        self._stale.append(trial)

    def _count_lost_attempt(self, study: optuna.Study, lost: FrozenTrial, verdict: str) -> None:
        """Record the attempt that lost its worker on the cell's next trial: a WAITING copy, or after
        `max_attempts` such attempts in a row a FAIL record that is never queued again (`failed_for_good`).
        A claim its worker never signed is queued again without counting: the cell never ran, so it cannot be what
        killed the worker (a kill between claim and start, or a claim whose answer the network lost)."""
        if "worker_pid" not in lost.user_attrs:
            requeue(study, lost)
            return
        attempts = [*lost.user_attrs.get(ATTEMPTS, []), attempt_record(lost, verdict, worker_exits(study))]
        if len(attempts) < self.max_attempts:
            requeue(study, lost, {ATTEMPTS: attempts})
        else:
            requeue(study, lost, {ATTEMPTS: attempts, FAILED_FOR_GOOD: True}, state=TrialState.FAIL)

    def retry_failed(self, study: optuna.Study) -> list[str]:
        """Queue the cells failed for good in `study` for another round of `max_attempts` attempts
        (`normbench run --retry-failed`); returns their ids. Their earlier rounds stay in the ledger."""
        retried = []
        for record in failed_for_good(study):
            requeue(study, record, {RETRY_ROUND: record.user_attrs.get(RETRY_ROUND, 0) + 1},
                    drop=(ATTEMPTS, FAILED_FOR_GOOD))
            retried.append(record.user_attrs.get("cell_id", f"trial {record.number}"))
        return retried

    def id(self, trial: optuna.Trial) -> int:
        """The storage's id of a claimed trial."""
        return self.ids.of(trial.study, trial.number)

    def frozen(self, trial: optuna.Trial) -> FrozenTrial:
        """A claimed trial as the ledger holds it now (state, attrs, its place in `retry_history`)."""
        return self.storage.get_trial(self.id(trial))

    def _fail(self, trial_id: int) -> bool:
        try:
            return self.storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            return False  # someone else already finished or failed it

    def close(self) -> None:
        """This process claims no more cells: free its OS lock (the kernel would at exit; a library caller lives on)."""
        if self._life is not None:
            self._life.release()
            self._life = None

    def release(self, study: optuna.Study, trial: optuna.Trial) -> None:
        """Give a claimed trial back (Ctrl-C): failed here, queued again for the next run."""
        if self._fail(self.id(trial)):
            requeue(study, self.frozen(trial))

    @contextmanager
    def heartbeat(self, trial: optuna.Trial) -> Iterator[None]:
        """Beat while a cell trains, so other machines can tell a live worker from a lost one."""
        if not self.heartbeats:
            yield
            return
        stop = threading.Event()
        record, get_trial = raw(self.storage, "record_heartbeat"), raw(self.storage, "get_trial")
        trial_id = self.id(trial)

        def beat() -> None:
            # Its own rhythm, not the retrying wrapper's backoff: after a blip the next beat must come within the
            # grace period, and a failed beat must never end the thread (peers would take the live cell).
            missed_since: float | None = None  # monotonic time of the first failed beat of an outage
            while not stop.is_set():
                wait = float(self.heartbeat_interval)
                try:
                    if get_trial(trial_id).state != TrialState.RUNNING:  # failed as stale while we stalled
                        self._lost.add(trial_id)
                        return
                    record(trial_id)
                    if missed_since is not None:  # peers' beats were lost too (see _beats_may_be_missing)
                        self.outage.came_back(time.monotonic() - missed_since)
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

    # ---------------------------------------------------------------------------------------------- finishing

    def claim_held(self, trial: optuna.Trial, *, ask: bool = False) -> bool:
        """False once another worker took this trial over (this one stalled or was cut off past the grace period).
        From the heartbeat's last look; `ask=True` asks the ledger now."""
        if self.id(trial) in self._lost:
            return False
        if ask and self.frozen(trial).state != TrialState.RUNNING:
            self._lost.add(self.id(trial))
            return False
        return True

    def finish(self, study: optuna.Study, trial: optuna.Trial, result: CellResult) -> None:
        """Store the metrics on the trial (user attrs "result": `result.summary()`, "history": the epochs), then
        mark it COMPLETE (or PRUNED). Raises ClaimLostError when another worker took the trial over meanwhile (it
        trains the cell; this result is not recorded twice)."""
        summary = result.summary()
        with self.owned(trial):
            trial.set_user_attr("result", summary)
            trial.set_user_attr("history", result.history_records())
            # numbers optuna-dashboard can show and sort by, as the leaderboard scores them (0 when diverged)
            trial.set_user_attr("test_top1", score_value(summary))
            trial.set_user_attr("val_top1", select_value(summary))
            if result.status == "pruned":
                study.tell(trial, state=TrialState.PRUNED)
            else:  # the value `normbench tune` ranks by: the selection rule's, final-epoch val
                study.tell(trial, select_value(summary))

    @contextmanager
    def owned(self, trial: optuna.Trial) -> Iterator[None]:
        """Write to a claimed trial. If another worker failed it as stale meanwhile (this one stalled past the
        grace at any point, even before its first epoch), the write raises ClaimLostError, not Optuna's error."""
        try:
            yield
        except UpdateFinishedTrialError:
            self._lost.add(self.id(trial))
            raise ClaimLostError(f"trial {trial.number} was taken over by another worker") from None


def requeue(study: optuna.Study, failed: FrozenTrial, user_attrs: dict[str, Any] | None = None, *,
            drop: tuple[str, ...] = (), state: TrialState = TrialState.WAITING) -> None:
    """Queue a WAITING copy of a failed trial: same params and cell, no worker, `user_attrs` added and `drop`
    removed. `state=FAIL` writes the record that ends the cell's attempts instead of queueing it."""
    kept = {k: v for k, v in failed.user_attrs.items() if k not in (*WORKER_ATTRS, *drop)}
    history = [*failed.system_attrs.get("retry_history", []), failed.number]
    study.add_trial(optuna.create_trial(
        state=state, params=failed.params, distributions=failed.distributions,
        user_attrs={**kept, **(user_attrs or {})},
        system_attrs={**failed.system_attrs, "failed_trial": history[0], "retry_history": history}))


def attempt_record(lost: FrozenTrial, verdict: str, exits: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the ledger knows of an attempt that lost its worker: its trial, the worker's host and pid, why it was
    taken for lost, when it started, who noticed, its MLflow run (the epochs it logged before it died), and, when
    the parent of a local worker saw it die (`exits`, from `worker_exits`), its exit code or signal and last
    stderr lines."""
    started = lost.datetime_start.isoformat(timespec="seconds") if lost.datetime_start else None
    record = {"trial": lost.number, "host": lost.user_attrs.get("worker_host"),
              "pid": lost.user_attrs.get("worker_pid"), "verdict": verdict, "started": started,
              "noticed_by": f"{worker_host()} pid {os.getpid()}", "mlflow_run_id": lost.user_attrs.get("mlflow_run_id")}
    return with_exit(record, exits or {})


def note_worker_exit(study: optuna.Study, host: str, pid: int, seen: dict[str, Any]) -> None:
    """Keep how a worker died (`seen`: exit code or signal, last stderr lines, node), as its parent saw it, on the
    study, where each attempt that worker lost picks it up (`worker_exits`, `failed_for_good`): the peer that counts
    the attempt may do so before the parent has looked."""
    study.set_user_attr(f"{WORKER_EXIT}{host}:{pid}", seen)


def worker_exits(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """`{"host:pid": how it died}` of the local workers whose parent noted their death (`note_worker_exit`)."""
    return {k[len(WORKER_EXIT):]: v for k, v in study.user_attrs.items() if k.startswith(WORKER_EXIT)}


def with_exit(attempt: dict[str, Any], exits: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The attempt with its worker's death (exit, exit_code, stderr, node) added, when noted and not there yet;
    its verdict then ends with the exit, for the leaderboard's table."""
    seen = exits.get(f"{attempt.get('host')}:{attempt.get('pid')}")
    if not seen or "exit" in attempt:
        return attempt
    return {**attempt, **seen, "verdict": f"{attempt.get('verdict', '?')}; {seen.get('exit', '?')}"}


def failed_for_good(study: optuna.Study) -> list[FrozenTrial]:
    """The records of the cells failed for good: a cell counts while it has no live trial and its newest trial is
    such a record (`--retry-failed` queues a newer trial; a later plain failure is retried as usual). Each attempt
    carries its worker's death as its parent saw it, when noted after the record was written (copies: the study's
    cached trials are left as they are)."""
    newest: dict[str | None, FrozenTrial] = {}
    live = set()
    for t in study.get_trials(deepcopy=False):
        cid = trial_cell_id(t)
        if t.state in LIVE:
            live.add(cid)
        if cid not in newest or t.number > newest[cid].number:
            newest[cid] = t
    records = [t for cid, t in newest.items() if cid is not None and cid not in live and t.state == TrialState.FAIL
               and t.user_attrs.get(FAILED_FOR_GOOD)]
    exits = worker_exits(study) if records else {}
    if not exits:
        return records
    merged = []
    for t in records:
        t = copy.copy(t)
        t.user_attrs = {**t.user_attrs, ATTEMPTS: [with_exit(a, exits) for a in t.user_attrs.get(ATTEMPTS, [])]}
        merged.append(t)
    return merged


def _named_for(study_name: str, suite: str) -> bool:
    """True when `study_name` is one of `suite`'s studies (run, bracketing round, report, search, tuned)."""
    names = StudyNames(suite)
    return (study_name in (names.run, names.report, names.tuned) or names.bracket_round(study_name) is not None
            or names.tune_point(study_name) is not None)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _never_owned(trial: FrozenTrial, grace_seconds: float) -> bool:
    """A worker killed between claiming a trial and writing its pid leaves a RUNNING trial nobody owns: one unsigned
    for longer than `grace_seconds`, the ledger's heartbeat grace (`Ledger.grace_period`, NORMBENCH_HEARTBEAT_GRACE):
    the silence after which a worker is taken for lost. A live worker signs within a write of its claim."""
    if "worker_pid" in trial.user_attrs or trial.datetime_start is None:
        return False
    return (datetime.datetime.now() - trial.datetime_start).total_seconds() > grace_seconds

