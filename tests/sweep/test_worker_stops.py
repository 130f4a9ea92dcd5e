"""A stop (Ctrl-C, SIGTERM: a KeyboardInterrupt in the worker) anywhere between claiming cells and training them
gives every claim back to the queue once (sweep/worker.py, sweep/cell_end.py `given_back_on_stop`): no trial stays
RUNNING for the next run to reclaim as a lost attempt, and no cell is queued twice."""

from __future__ import annotations

import collections

import pytest
from optuna.trial import TrialState

from normbench.contracts.suite import load_suite
from normbench.store.journal import LedgerWriteError
from normbench.store.ledger import Ledger
from normbench.sweep import worker
from normbench.sweep.fuse_plan import FusePlan
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_jobs
from normbench.tracking.tracker import Tracker

MATRIX = {"depth": [1], "layer": ["layernorm"], "lr": [1e-3, 3e-3], "seed": [0]}


def _queued(write_suite, tmp_path, matrix=MATRIX):
    suite = load_suite(write_suite(matrix=matrix))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    return suite, ledger, study


def _queue_of(study) -> tuple[list[str], collections.Counter]:
    """The cells still RUNNING, and how many copies of each cell wait in the queue."""
    trials = study.get_trials(deepcopy=False)
    running = [t.user_attrs["cell_id"] for t in trials if t.state == TrialState.RUNNING]
    return running, collections.Counter(t.user_attrs["cell_id"] for t in trials if t.state == TrialState.WAITING)


class _StoppedAtStart(Progress):
    """Stopped as a cell's line appears: after its claim and its MLflow run, before its first step (where a long
    checkpoint read sits)."""

    def start_cell(self, *args, **kwargs):
        raise KeyboardInterrupt


class _Runs:
    """The MLflow side as the worker sees it: which runs it opened, and how each was closed."""

    def __init__(self):
        self.closed: dict[str, str] = {}

    def start(self, run):
        return f"run-{len(self.closed)}"

    def fail(self, run_id, status="FAILED"):
        self.closed[run_id] = status


def test_a_stop_after_the_claim_and_before_training_gives_the_cell_back_once(write_suite, tmp_path):
    suite, ledger, study = _queued(write_suite, tmp_path)
    tracker = _Runs()
    with pytest.raises(KeyboardInterrupt):
        worker.work(run_jobs(suite, study, ledger), Ledger(None, tmp_path), tracker, "cpu",
                    _StoppedAtStart(total=2, quiet=True), suite.name)
    running, waiting = _queue_of(study)
    assert running == []
    assert sorted(waiting.values()) == [1, 1] and len(waiting) == 2  # each cell queued once, the stopped one too
    failed = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL]
    assert len(failed) == 1 and "attempts" not in failed[0].user_attrs  # given back: no attempt counted
    assert tracker.closed == {"run-0": "KILLED"}  # its run opened, then closed as a stopped cell's, not left open


@pytest.mark.parametrize("stop", [KeyboardInterrupt, LedgerWriteError])  # SIGTERM; the ledger's disk full
def test_a_stop_while_a_group_is_being_assembled_gives_every_member_back(stop, write_suite, tmp_path, monkeypatch):
    suite, ledger, study = _queued(write_suite, tmp_path)

    def stopped(job, claims, **kwargs):  # a stop in the group's set-up: its checkpoints read, its runs not started
        assert len(claims) == 2
        raise stop("stopped")

    monkeypatch.setattr(worker, "run_group", stopped)
    with pytest.raises(stop):
        worker.work(run_jobs(suite, study, ledger), Ledger(None, tmp_path), Tracker(tmp_path, suite.name), "cpu",
                    Progress(total=2, quiet=True), suite.name, fuse=FusePlan(k=2, wait_s=0.0))
    running, waiting = _queue_of(study)
    assert running == [] and sorted(waiting.values()) == [1, 1]


def test_a_ledger_failure_while_a_group_claims_its_cells_gives_back_those_it_claimed(write_suite, tmp_path):
    suite, ledger, study = _queued(write_suite, tmp_path, {**MATRIX, "seed": [0, 1]})  # one row, 4 cells
    worker_ledger = Ledger(None, tmp_path)
    claim, claimed = worker_ledger.claim, []

    def third_claim_refused(*args, **kwargs):  # the disk fills as the group takes its third cell
        if len(claimed) == 2:
            raise LedgerWriteError("ledger.journal: cannot write the ledger (No space left)")
        claimed.append(claim(*args, **kwargs))
        return claimed[-1]

    worker_ledger.claim = third_claim_refused
    with pytest.raises(LedgerWriteError):
        worker.work(run_jobs(suite, study, ledger), worker_ledger, _Runs(), "cpu", Progress(total=4, quiet=True),
                    suite.name, fuse=FusePlan(k=4, wait_s=0.0))
    running, waiting = _queue_of(study)
    assert len(claimed) == 2 and running == [] and sorted(waiting.values()) == [1, 1, 1, 1]


def test_a_claim_given_back_twice_is_queued_once(write_suite, tmp_path):
    suite, ledger, study = _queued(write_suite, tmp_path)
    claim = ledger.claim(study)
    claim.release()
    claim.release()  # the turn's give-back after the cell's own
    running, waiting = _queue_of(study)
    assert running == [] and sorted(waiting.values()) == [1, 1]


def test_giving_back_a_claim_this_worker_recorded_writes_nothing(write_suite, tmp_path):
    """A stop's give-back of a whole turn reaches claims already recorded: the ledger gets no line for them."""
    suite, ledger, study = _queued(write_suite, tmp_path)
    claim = ledger.claim(study)
    claim.fail("RuntimeError: a crash, recorded")
    journal = tmp_path / "ledger.journal"
    before = journal.read_bytes()
    claim.release()
    assert journal.read_bytes() == before
    assert [t.state for t in study.get_trials(deepcopy=False)].count(TrialState.WAITING) == 1  # the other cell only


@pytest.mark.parametrize("stop", [KeyboardInterrupt, LedgerWriteError])
def test_a_stop_inside_the_claim_gives_the_trial_it_took_back(write_suite, tmp_path, monkeypatch, stop):
    # Ctrl-C (or a refused write) while the claim signs the trial it just took: the worker never holds it, so the
    # claim itself gives it back (seen once in the CI under load: a RUNNING trial left after a Ctrl-C)
    suite, ledger, study = _queued(write_suite, tmp_path)

    def stopped(self, claim):
        raise stop("stopped while signing") if stop is LedgerWriteError else stop()

    monkeypatch.setattr(Ledger, "_sign", stopped)
    with pytest.raises(stop):
        ledger.claim(study)
    running, waiting = _queue_of(study)
    assert running == [] and set(waiting.values()) == {1} and len(waiting) == 2  # each cell queued once
