"""The worker's account of its time: training against the ledger's and MLflow's bookkeeping."""

from __future__ import annotations

import re

from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_jobs
from normbench.sweep.worker import LOST, WorkSummary, run_cell, work


def test_bookkeeping_is_the_busy_time_not_spent_training():
    summary = WorkSummary(cells_run=2, busy_seconds=50.0, train_seconds=49.0)
    summary.add(WorkSummary(cells_run=1, errors=1, busy_seconds=30.0, train_seconds=29.8))
    assert (summary.cells_run, summary.errors) == (3, 1)
    assert summary.bookkeeping() == "ledger + MLflow: 1.2 s of 80.0 s (1.5%)"
    assert WorkSummary().bookkeeping() == ""  # this process ran no cell


def test_a_run_reports_its_bookkeeping_share(write_suite, tmp_path, capsys):
    path = write_suite()
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    line = re.search(r"ledger \+ MLflow: ([\d.]+) s of ([\d.]+) s \(([\d.]+)%\)", capsys.readouterr().err)
    assert line is not None
    spent, busy, share = map(float, line.groups())
    # shown to 0.1 s: a tiny cell's ledger writes (MLflow is logged off the training thread) may round to 0.0
    assert 0 <= spent <= busy and 0 < busy and 0 <= share < 100


class _TakenOverAtStart:
    """A tracker whose run opens just as another worker fails this trial as stale (the first worker stalled
    between its claim and its first write)."""

    def __init__(self, study):
        self.study, self.calls = study, []

    def start(self, run):
        self.study.tell(int(run.tags["trial"]), state=TrialState.FAIL)  # what a peer's stale-trial sweep does
        return "run-1"

    def fail(self, run_id, status="FAILED"):
        self.calls.append((run_id, status))


def test_a_cell_taken_over_before_its_first_write_is_stopped_not_crashed(write_suite, tmp_path):
    suite = load_suite(write_suite())
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    job = run_jobs(suite, study, ledger).jobs()[0]
    claim = ledger.claim(job.study)
    tracker = _TakenOverAtStart(job.study)
    progress = Progress(total=1, quiet=True)
    outcome, trained = run_cell(job, claim, ledger=ledger, tracker=tracker, device="cpu", progress=progress,
                                suite_name=suite.name)
    assert (outcome, trained) == (LOST, 0.0)
    assert tracker.calls == [("run-1", "KILLED")]  # its MLflow run never reads FINISHED
    frozen = job.study.get_trials(deepcopy=False)[claim.number]
    assert frozen.state == TrialState.FAIL and "mlflow_run_id" not in frozen.user_attrs


def test_a_lost_claim_is_counted_as_lost_not_as_a_cell_run(write_suite, tmp_path):
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    summary = work(run_jobs(suite, study, ledger), ledger, _TakenOverAtStart(study), "cpu",
                   Progress(total=1, quiet=True), suite.name)
    assert (summary.cells_run, summary.lost_claims, summary.errors) == (0, 1, 0)


def test_run_without_workers_starts_the_fused_workers_per_gpu_that_fuse_auto_names(monkeypatch):
    """Several fused workers share a GPU (sweep/fuse_plan.py); `--fuse K` or a CPU keep one worker per device."""
    import torch

    from normbench.sweep import launch, worker
    from normbench.sweep.fuse_plan import FusePlan

    monkeypatch.setattr(launch, "default_workers", lambda device: 2)  # two GPUs
    monkeypatch.setattr(worker, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(worker, "fuse_plan", lambda fuse, device: FusePlan(k=16, workers=3))
    assert worker.local_workers("cuda", "auto") == 6
    assert worker.local_workers("cuda", 8) == 2
    monkeypatch.setattr(worker, "resolve_device", lambda device: torch.device("cpu"))
    assert worker.local_workers("cpu", "auto") == 2  # launch's answer, untouched
