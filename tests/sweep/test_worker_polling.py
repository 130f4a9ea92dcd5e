"""Polling that scales: a worker reconciles every MLflow run with the ledger once (one full search when it starts),
then on each turn closes only the runs of the trials the ledger reclaims, found by that trial alone."""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient

from normbench.errors import NormbenchError
from normbench.spec.results import CellResult
from normbench.spec.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep import worker
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_jobs
from normbench.tracking.tracker import Tracker

FULL = "attributes.status = 'RUNNING'"
LAYERS = ["layernorm", "layerscale", "rezero"]


def no_op_cell(config, device, on_epoch=None, dist=None):
    record = {"epoch": 0, "train_loss": 1.0, "val_top1": 50.0, "lr": 1e-3, "grad_norm": 1.0, "images_per_sec": 1.0,
              "step": 1, "images": 1}
    on_epoch(record)
    nan = math.nan
    return CellResult(status="ok", best_val_top1=50.0, final_val_top1=50.0, val_top1=50.0, test_top1=nan,
                      best_val_epoch=0, train_size=1, val_size=1, test_size=1, num_classes=10, train_loss=1.0,
                      epochs_run=1, images_per_sec=1.0, params=1, seconds=0.0, history=[record])


def searches(tracker: Tracker) -> list[str]:
    """Record the filter of every search_runs the tracker's client makes."""
    seen: list[str] = []
    search = tracker.client.search_runs

    def spy(experiment_ids, filter_string="", *args, **kwargs):
        seen.append(filter_string)
        return search(experiment_ids, filter_string, *args, **kwargs)

    tracker.client.search_runs = spy
    return seen


def test_a_worker_searches_every_run_once_not_on_every_turn(write_suite, tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "train_cell", no_op_cell)
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]}))
    ledger, tracker = Ledger(None, tmp_path), Tracker(tmp_path, suite.name)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    seen = searches(tracker)
    summary = worker.work(run_jobs(suite, study, ledger), ledger, tracker, "cpu", Progress(total=3, quiet=True),
                          suite.name)
    assert summary.cells_run == 3
    assert seen.count(FULL) == 1, seen  # 4 turns (3 cells, then none left): it was one full search per turn


def test_a_reclaimed_trial_whose_worker_died_before_naming_its_run_gets_that_run_closed(write_suite, tmp_path):
    suite = load_suite(write_suite())
    ledger, tracker = Ledger(None, tmp_path), Tracker(tmp_path, suite.name)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    dead = Ledger(None, tmp_path)  # a worker that claims, opens its run, and is killed before naming it
    trial = dead.claim(dead.study(study.study_name))
    run_id = tracker.start("a cell", {}, tags={"study": study.study_name, "trial": str(trial.number)})
    dead.close()  # its OS lock freed, as the kernel frees it when the process is killed
    seen = searches(tracker)
    worker.close_lost(ledger, study, tracker)
    assert MlflowClient(tracker.uri).get_run(run_id).info.status == "FAILED"
    assert seen == [f"{FULL} and tags.study = '{study.study_name}' and tags.trial = '{trial.number}'"]


def test_the_poll_interval_is_set_by_the_environment_and_a_bad_one_is_refused(monkeypatch):
    assert worker.poll_seconds() == 2.0
    monkeypatch.setenv("NORMBENCH_POLL_SECONDS", "15")
    assert worker.poll_seconds() == 15.0
    for bad in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv("NORMBENCH_POLL_SECONDS", bad)
        with pytest.raises(NormbenchError, match="NORMBENCH_POLL_SECONDS=.*more than 0.*unset it"):
            worker.poll_seconds()
