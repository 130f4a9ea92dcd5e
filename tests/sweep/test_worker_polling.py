"""Polling that scales: a worker never searches MLflow (its runs are keyed by their study and trial; settling them is
`normbench sync`'s, tracking/sync.py), whatever the number of turns; a dead worker's cell goes back to the queue by
the ledger alone, and the next sync closes its run FAILED."""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient

from normbench.contracts.results import CellResult
from normbench.contracts.suite import load_suite
from normbench.errors import NormbenchError
from normbench.store.attempts import reclaim
from normbench.store.ledger import Ledger
from normbench.sweep import plan, worker
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_jobs
from normbench.tracking.run_record import trial_run
from normbench.tracking.sync import sync
from normbench.tracking.tracker import Tracker

LAYERS = ["layernorm", "layerscale", "rezero"]


def no_op_cell(config, device, on_epoch=None, dist=None):
    record = {"epoch": 0, "train_loss": 1.0, "val_top1": 50.0, "lr": 1e-3, "grad_norm": 1.0, "images_per_sec": 1.0,
              "step": 1, "images": 1}
    on_epoch(record)
    nan = math.nan
    return CellResult(status="ok", best_val_top1=50.0, final_val_top1=50.0, val_top1=50.0, test_top1=nan,
                      best_val_epoch=0, train_size=1, val_size=1, test_size=1, num_classes=10, train_loss=1.0,
                      epochs_run=1, images_per_sec=1.0, params=1, seconds=0.0, history=[record])


def searches(monkeypatch) -> list[str]:
    """Record the filter of every search_runs any MlflowClient makes."""
    seen: list[str] = []
    search = MlflowClient.search_runs

    def spy(self, experiment_ids, filter_string="", *args, **kwargs):
        seen.append(filter_string)
        return search(self, experiment_ids, filter_string, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "search_runs", spy)
    return seen


def test_a_worker_never_searches_its_runs(write_suite, tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "train_cell", no_op_cell)
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]}))
    ledger, tracker = Ledger(None, tmp_path), Tracker(tmp_path, suite.name)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    seen = searches(monkeypatch)
    summary = worker.work(run_jobs(suite, study, ledger), ledger, tracker, "cpu", Progress(total=3, quiet=True),
                          suite.name)
    tracker.finish()
    assert summary.cells_run == 3
    # only its suite's parent run, looked up once per process (and again after creating it, in case of a race)
    assert set(seen) == {"tags.kind = 'leaderboard'"} and len(seen) <= 2, seen


def test_a_dead_workers_cell_is_requeued_by_the_ledger_and_its_run_closed_by_the_next_sync(write_suite, tmp_path):
    suite = load_suite(write_suite())
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    dead = Ledger(None, tmp_path)  # a worker that claims, opens its run, reports an epoch and is killed
    trial = dead.claim(dead.study(study.study_name))
    trial.report(12.5, 4)
    tracker = Tracker(tmp_path, suite.name)
    tracker.start(trial_run(study.study_name, trial.frozen(), suite))  # as the worker starts it
    tracker.finish()
    dead.close()  # its OS lock freed, as the kernel frees it when the process is killed
    [failed] = reclaim(ledger, study)  # what the worker loop does on every turn
    assert failed.number == trial.number
    sync(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name(suite.name).experiment_id],
                               f"tags.trial = '{trial.number}'")
    assert run.info.status == "FAILED" and run.data.tags["ledger_state"] == "FAIL"


def test_the_poll_interval_is_set_by_the_environment_and_a_bad_one_is_refused(monkeypatch):
    assert worker.poll_seconds() == 2.0
    monkeypatch.setenv("NORMBENCH_POLL_SECONDS", "15")
    assert worker.poll_seconds() == 15.0
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv("NORMBENCH_POLL_SECONDS", bad)
        with pytest.raises(NormbenchError, match="NORMBENCH_POLL_SECONDS=.*more than 0.*unset it"):
            worker.poll_seconds()


def test_a_worker_trains_what_the_next_stage_queues_into_a_study_it_already_works_on(write_suite, tmp_path,
                                                                                      monkeypatch):
    """A report stage re-queued into its existing study (after a withdrawal) is work, not the end: the worker that
    queued it once left here, and the sweep went on with one worker of two."""
    monkeypatch.setattr(worker, "train_cell", no_op_cell)
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]}))
    ledger, tracker = Ledger(None, tmp_path), Tracker(tmp_path, suite.name)
    study = open_run_study(ledger, suite)
    first, *later = [{c.cell_id: c.axes} for c in suite.cells()]
    ledger.enqueue(study, first)
    stages = iter(later)  # each call queues one more cell, into the same study

    def queue_next() -> None:
        if (cells := next(stages, None)) is not None:
            ledger.enqueue(study, cells)

    the_plan = plan.Plan(jobs=run_jobs(suite, study, ledger).jobs, queue_next=queue_next)
    summary = worker.work(the_plan, ledger, tracker, "cpu", Progress(total=3, quiet=True), suite.name)
    tracker.finish()
    assert summary.cells_run == 3
