"""Which cells exist, who runs them, which finished: an Optuna storage, one trial per cell.

A journal file in the output folder or, with `--storage postgresql://...`, a shared database. A cell is a WAITING
trial until a worker claims it (atomically: WAITING -> RUNNING), then COMPLETE or PRUNED. This module is the queue:
which trial is whose, queued once. Which claim lost its worker and when a cell is failed for good: store/attempts.py.
Outages: store/retry.py.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from normbench import settings, stopping
from normbench.contracts.names import OutputFolder, StudyNames
from normbench.errors import ClaimLostError, NormbenchError, ServerUnreachableError
from normbench.store.claim import Claim
from normbench.store.journal import SafeJournalFileBackend
from normbench.store.locks import LifeLock, folder_lock
from normbench.store.migrations import OBJECTIVE_NAME, trial_cell_id
from normbench.store.optuna_api import TRIAL_KEY, TrialIds, find_trial_by_key
from normbench.store.queue_lock import lock_key, queue_lock
from normbench.store.retry import NOT_LANDED, Outage, redact
from normbench.store.trial_params import add_finished_copy, add_waiting_trial, axis_distributions

WORKER_ATTRS = ("worker_lock", "worker_host", "worker_pid", "mlflow_run_id")  # a copy has no worker yet
UNFINISHED = (TrialState.WAITING, TrialState.RUNNING)
LIVE = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED)
FAILED_FOR_GOOD = "failed_for_good"  # user attr of the FAIL record that ends a cell's round: not queued again
WITHDRAWN = "withdrawn"  # user attr (why) of a queued cell taken back untrained: no rule asks for it any more
SUITE = "suite"  # study user attr: the suite whose workers may claim its cells (with "recipe", the recipe hash)
optuna.logging.set_verbosity(optuna.logging.WARNING)
# cell_id -> (a finished trial of another ledger, the user attrs its copy keeps), or None: sweep/adopt.py
Adopt = Callable[[str], tuple[FrozenTrial, dict[str, Any]] | None]


def worker_host() -> str:
    """This machine's name in the ledger; NORMBENCH_HOST overrides it (containers that share a hostname)."""
    return settings.current().host


def max_attempts_from_env() -> int:
    """NORMBENCH_MAX_ATTEMPTS (default 3): attempts in a row a cell may lose its worker before it is failed for good."""
    return settings.current().max_attempts


def engine_kwargs(url: str, grace_period: int) -> dict[str, Any]:
    """SQLAlchemy engine options. On PostgreSQL a worker stopped (SIGSTOP, a frozen VM) inside a transaction would
    hold its row locks and block every peer: the server ends such a session after the grace; the worker retries."""
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        kwargs["connect_args"] = {"options": f"-c idle_in_transaction_session_timeout={grace_period * 1000}"}
    return kwargs


class Ledger:
    """The record of cells. `url=None` keeps it in `<out_dir>/ledger.journal`."""

    def __init__(self, url: str | None, out_dir: Path, *, heartbeat_interval: int | None = None,
                 grace_period: int | None = None, max_attempts: int | None = None) -> None:
        """Beat every `heartbeat_interval` s (NORMBENCH_HEARTBEAT_INTERVAL, default 10); a database worker silent for
        `grace_period` s (NORMBENCH_HEARTBEAT_GRACE, default 60) is lost; `max_attempts`: NORMBENCH_MAX_ATTEMPTS."""
        configured = settings.current()
        heartbeat_interval = heartbeat_interval or configured.heartbeat_interval
        grace_period = grace_period or configured.heartbeat_grace
        self.url = redact(url) if url else str(OutputFolder(out_dir).ledger)
        self._owner: tuple[str, str] | None = None  # (suite, recipe hash) this process works for: `serve`
        self.heartbeat_interval, self.grace_period = heartbeat_interval, grace_period
        self.max_attempts = max_attempts or max_attempts_from_env()
        self._stale: list[FrozenTrial] = []  # what Optuna's fail_stale_trials failed in `fail_stale`'s last call
        self._life: LifeLock | None = None  # journal ledgers: held while this process lives, named by its claims
        self.outage: Outage | None = None  # database ledgers: the outage their calls wait out together
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
                self.storage = optuna.storages.RDBStorage(
                    url, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                    heartbeat_stale_trial_callback=self._on_stale, engine_kwargs=engine_kwargs(url, grace_period))
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
        find_trial_by_key(self.storage)
        self.ids, self.heartbeats = TrialIds(self.storage), True

    def call(self, fn: Callable[..., Any], *args: Any, unsafe: bool = False,
             landed: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, retried through a database outage (store/retry.py: `unsafe`, `landed`)."""
        if self.outage is None:
            return fn(*args, **kwargs)
        return self.outage.call(fn, *args, unsafe=unsafe, landed=landed, **kwargs)

    # ------------------------------------------------------------------------------------------------ studies

    def serve(self, suite: str, recipe: str) -> None:
        """Stamp the studies this process creates with `suite` and `recipe` (hash); each claim checks the stamp."""
        self._owner = (suite, recipe)

    def study(self, name: str, **kwargs: Any) -> optuna.Study:
        """Study `name`, created (and stamped) when missing. An existing one is loaded without a write: create_study
        appends a journal record even then, and workers look their studies up in a loop."""
        return self.call(self._study, name, **kwargs)

    def _study(self, name: str, **kwargs: Any) -> optuna.Study:
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
                study.set_metric_names([OBJECTIVE_NAME])
        return study

    def study_names(self) -> list[str]:
        # not get_all_study_summaries: it copies every trial of every study, 70 ms a call on a 240-cell journal
        return self.call(optuna.study.get_all_study_names, self.storage)

    def trials(self, study: optuna.Study, states: tuple[TrialState, ...] | None = None) -> list[FrozenTrial]:
        """The study's trials (in `states`), read through an outage."""
        return self.call(study.get_trials, deepcopy=False, states=states)

    def enqueue(self, study: optuna.Study, items: dict[str, dict[str, Any]],
                extra: dict[str, dict[str, Any]] | None = None, adopt: Adopt | None = None) -> int:
        """Queue each `cell_id -> axes` with no live trial (`extra[cell_id]`: more user attrs); returns how many.
        `adopt(cell_id)`: another ledger's finished trial of that cell and the user attrs to give its copy, added
        finished instead of queued (sweep/adopt.py). Retried whole through an outage: a try sees what an earlier one
        queued."""
        return self.call(self._enqueue, study, items, extra, adopt)

    def _enqueue(self, study: optuna.Study, items: dict[str, dict[str, Any]],
                 extra: dict[str, dict[str, Any]] | None, adopt: Adopt | None) -> int:
        # current-format ids, so an old ledger (unsorted axes) is not queued twice; cells failed for good stay out
        # until `--retry-failed`, else every starting worker would feed them again
        with self.queue_guard(study.study_name):
            present = {trial_cell_id(t) for t in study.get_trials(deepcopy=False, states=LIVE)}
            present |= {trial_cell_id(t) for t in ended_cells(study)}
            missing = {cid: axes for cid, axes in items.items() if cid not in present}
            queued = [t.user_attrs.get("axes") or {} for t in study.get_trials(deepcopy=False)]
            distributions = axis_distributions([*queued, *missing.values()])  # the axes as params, for the dashboard
            for cid, axes in missing.items():
                user_attrs = {"cell_id": cid, "axes": axes, **(extra or {}).get(cid, {})}
                if adopt is not None and (donor := adopt(cid)) is not None:
                    source, attrs = donor
                    add_finished_copy(study, source, axes, distributions, {**attrs, **user_attrs}, self._key())
                else:
                    add_waiting_trial(study, axes, distributions, user_attrs=user_attrs, system_attrs=self._key())
        return len(missing)

    # ---------------------------------------------------------------------------------------------- claiming

    def claim(self, study: optuna.Study, wanted: Callable[[FrozenTrial], bool] | None = None) -> Claim | None:
        """Take a WAITING trial (one `wanted` accepts), or None if none is left; NormbenchError if the study is not
        the served suite's. A claim whose answer an outage lost reads "taken" on replay: `reclaim` frees that
        unsigned trial uncounted."""
        waiting = self.trials(study, (TrialState.WAITING,))
        for i, frozen in enumerate(t for t in waiting if wanted is None or wanted(t)):
            if i == 0:  # once per claim that finds work, not on every idle poll
                self._check_owner(study)
            trial_id = taken = None
            try:
                trial_id = self.call(self.ids.of, study, frozen.number)
                taken, pressed = self.call(self._take, trial_id)
                if pressed:
                    raise KeyboardInterrupt
                if not taken:
                    continue  # another worker took it first
            except UpdateFinishedTrialError:
                continue
            except KeyboardInterrupt:
                if taken and trial_id is not None:  # taken, not yet held: back to the queue uncounted
                    self._give_back_taken(None, study, trial_id)
                raise
            claim = None
            try:
                if self.heartbeats:  # beat at once: a worker lost before its cell's heartbeat thread starts is seen
                    self.call(self.storage.record_heartbeat, trial_id)  # type: ignore[attr-defined]
                claim = Claim(self, study, optuna.Trial(study, trial_id), trial_id)
                self._sign(claim)
                if self._duplicate(study, frozen):
                    claim.fail("a lower-numbered copy of this cell runs")
                    continue
            except ClaimLostError:  # stalled past the grace while signing: a peer failed and re-queued it
                continue
            except (KeyboardInterrupt, NormbenchError):
                # stopped (Ctrl-C, SIGTERM, the ledger or disk failing) after taking the trial, before the worker
                # holds it: back to the queue uncounted, as sweep/cell_end.py's given_back_on_stop does for a claim
                self._give_back_taken(claim, study, trial_id)
                raise
            return claim
        return None

    def _take(self, trial_id: int) -> tuple[bool, bool]:
        """One try at WAITING -> RUNNING: whether it landed for this worker, and whether a Ctrl-C came during the
        write (held until it returned, so `claim` knows whether it holds the trial it gives back; between the outage
        retries of `call` a Ctrl-C lands at once)."""
        with stopping.interrupts_held() as pressed:
            taken = bool(self.storage.set_trial_state_values(trial_id, state=TrialState.RUNNING))
        return taken, bool(pressed)

    def _give_back_taken(self, claim: Claim | None, study: optuna.Study, trial_id: int) -> None:
        try:
            (claim or Claim(self, study, optuna.Trial(study, trial_id), trial_id)).release()
        except Exception as e:  # the ledger that stopped the claim may refuse this too: the next run's reclaim does
            warnings.warn(f"could not give trial {trial_id} back to the queue ({e}); the next run's reclaim does",
                          stacklevel=2)

    def _check_owner(self, study: optuna.Study) -> None:
        """Raise unless the study is the served suite's and recipe's (a shared database holds others'): by its stamp,
        read afresh so a study replaced mid-run is caught at the next claim, or, unstamped, by its name."""
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

    def _sign(self, claim: Claim) -> None:
        """Write who holds the trial, so peers can tell a dead holder from a live one."""
        if not self.heartbeats:  # a journal file: peers tell this process alive by its OS lock
            self._life = self._life or LifeLock(Path(self.url).parent)
            claim.set_attr("worker_lock", self._life.path.name)
        claim.set_attr("worker_host", worker_host())
        claim.set_attr("worker_pid", os.getpid())

    def _duplicate(self, study: optuna.Study, claimed: FrozenTrial) -> bool:
        """Two workers can queue a cell at once: the lowest-numbered live copy runs. Asymmetric on purpose: two claimed
        copies must not both be dropped (a symmetric rule lost cells), nor both kept."""
        cid = claimed.user_attrs.get("cell_id")
        if cid is None:
            return False
        for t in self.trials(study, LIVE):
            if t.user_attrs.get("cell_id") != cid or t.number == claimed.number:
                continue
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or t.number < claimed.number:
                return True
        return False

    def fail_stale(self, study: optuna.Study) -> list[FrozenTrial]:
        """Optuna's `fail_stale_trials` on a database ledger: the trials whose FAIL of ours landed (store/attempts.py
        counts them)."""
        self._stale = []
        self.call(optuna.storages.fail_stale_trials, study)
        return self._stale

    def _on_stale(self, study: optuna.Study, trial: FrozenTrial) -> None:
        # collected for `fail_stale`: a write in here would not be retried on its own
        self._stale.append(trial)

    def queue_guard(self, study_name: str) -> contextlib.AbstractContextManager[None]:
        """Hold the study's queue for the block: queueing is check-then-insert, and failing an attempt then adding
        its copy (or its failed-for-good record) is two writes; a worker starting between them saw the cell with no
        live trial and queued it afresh, a second round past NORMBENCH_MAX_ATTEMPTS. An OS lock beside a journal, an
        advisory lock on PostgreSQL (store/queue_lock.py). Not reentrant: never nest two."""
        if self.journal is not None:
            return folder_lock(Path(self.url).parent, f"queue-{lock_key(study_name) & 0xFFFFFFFF:08x}")
        return queue_lock(self.storage, self.outage, study_name, self.grace_period)

    def requeue(self, study: optuna.Study, failed: FrozenTrial, user_attrs: dict[str, Any] | None = None, *,
                drop: tuple[str, ...] = (), state: TrialState = TrialState.WAITING) -> None:
        """`requeue` (below), retried through an outage: after a lost answer the copy is looked up by its key."""
        key = self._key()

        def landed() -> Any:
            return None if any(t.system_attrs.get(TRIAL_KEY) == key[TRIAL_KEY] for t in self.trials(study)) \
                else NOT_LANDED

        self.call(requeue, study, failed, user_attrs, drop=drop, state=state, system_attrs=key, unsafe=True,
                  landed=landed if key else None)

    def fail_trial(self, trial_id: int) -> bool:
        """FAIL a RUNNING trial; True when this process's FAIL landed (the one that counts and re-queues it)."""
        def landed() -> Any:
            return True if self.storage.get_trial(trial_id).state == TrialState.FAIL else NOT_LANDED

        try:
            return self.call(self.storage.set_trial_state_values, trial_id, state=TrialState.FAIL, unsafe=True,
                             landed=landed)
        except UpdateFinishedTrialError:
            return False  # someone else already finished or failed it

    def withdraw(self, study: optuna.Study, waiting: FrozenTrial, why: str) -> bool:
        """Take back a WAITING cell no rule asks for any more: claimed first (WAITING -> RUNNING is atomic, so a cell a
        worker took meanwhile trains on), marked WITHDRAWN, then FAIL with no worker. True if this call withdrew it.
        Killed midway, the unsigned claim is re-queued by `reclaim` and withdrawn again by the next run."""
        trial_id = self.call(self.ids.of, study, waiting.number)
        try:
            if not self.call(self.storage.set_trial_state_values, trial_id, state=TrialState.RUNNING):
                return False
        except UpdateFinishedTrialError:
            return False
        self.call(self.storage.set_trial_user_attr, trial_id, WITHDRAWN, why)
        return self.fail_trial(trial_id)

    def _key(self) -> dict[str, str]:
        """A fresh key for a trial queued on a database (`TRIAL_KEY`), by which a lost answer is looked up."""
        return {TRIAL_KEY: uuid.uuid4().hex} if self.outage is not None else {}

    def close(self) -> None:
        """This process claims no more cells: free its OS lock (the kernel would at exit; a library caller lives on)."""
        if self._life is not None:
            self._life.release()
            self._life = None


def requeue(study: optuna.Study, failed: FrozenTrial, user_attrs: dict[str, Any] | None = None, *,
            drop: tuple[str, ...] = (), state: TrialState = TrialState.WAITING,
            system_attrs: dict[str, Any] | None = None) -> None:
    """Copy `failed` as WAITING (or FAIL: the cell's last record): no worker, `user_attrs` added, `drop` removed."""
    kept = {k: v for k, v in failed.user_attrs.items() if k not in (*WORKER_ATTRS, *drop)}
    history = [*failed.system_attrs.get("retry_history", []), failed.number]
    study.add_trial(optuna.create_trial(
        state=state, params=failed.params, distributions=failed.distributions,
        user_attrs={**kept, **(user_attrs or {})},
        system_attrs={**failed.system_attrs, "failed_trial": history[0], "retry_history": history,
                      **(system_attrs or {})}))


def newest_trials(trials: list[FrozenTrial]) -> dict[str, FrozenTrial]:
    """Each cell's newest trial among `trials` (one study's), by cell id; trials that are no cell are left out. A cell
    whose attempt was given back (FAIL) and whose copy was then withdrawn reads as withdrawn."""
    newest: dict[str, FrozenTrial] = {}
    for t in trials:
        cid = trial_cell_id(t)
        if cid is not None and (cid not in newest or t.number > newest[cid].number):
            newest[cid] = t
    return newest


def ended_cells(study: optuna.Study) -> list[FrozenTrial]:
    """The FAIL records that end a cell's round (FAILED_FOR_GOOD): cells with no live trial whose newest trial is
    such a record, never queued again until `--retry-failed` (store/attempts.py)."""
    return [t for t in _failed_last(study) if t.user_attrs.get(FAILED_FOR_GOOD)]


def failed_to_retry(study: optuna.Study) -> list[FrozenTrial]:
    """The FAIL records of cells with no live trial that neither end them (failed for good) nor withdrew them: the
    cell raised (`Claim.fail`), or its worker was lost between failing a given-back attempt and queueing the copy.
    The next run queues them again, as it queues the matrix (sweep/run.py `open_run`); the run they failed in does
    not, or a cell that always raises would be queued again each time a worker's queue ran dry."""
    return [t for t in _failed_last(study) if not t.user_attrs.get(FAILED_FOR_GOOD) and not withdrawn(t)]


def _failed_last(study: optuna.Study) -> list[FrozenTrial]:
    """The newest trial of each cell with no live trial, where that trial is a FAIL record."""
    trials = study.get_trials(deepcopy=False)
    live = {trial_cell_id(t) for t in trials if t.state in LIVE}
    return [t for cid, t in newest_trials(trials).items() if cid not in live and t.state == TrialState.FAIL]


def withdrawn(trial: FrozenTrial) -> bool:
    """A cell taken back untrained (`Ledger.withdraw`): not a lost attempt, not failed for good, free to queue again."""
    return trial.state == TrialState.FAIL and WITHDRAWN in trial.user_attrs


def _named_for(study_name: str, suite: str) -> bool:
    """True when `study_name` is one of `suite`'s studies (run, bracketing round, report, search, tuned)."""
    names = StudyNames(suite)
    return (study_name in (names.run, names.report, names.tuned) or names.bracket_round(study_name) is not None
            or names.tune_point(study_name) is not None)
