"""What replaced the spool: nothing waits for MLflow and nothing is kept aside for it. The live logger queues its
writes to a background thread, so a store that refuses them or answers slowly never holds training up; a run it
could not finish is left for `normbench sync`, which completes it from the ledger."""

from __future__ import annotations

import threading
import time

from mlflow.tracking import MlflowClient

from normbench.contracts.results import CellResult
from normbench.store.journal import ledger_identity
from normbench.store.ledger import Ledger
from normbench.tracking import tracker as tracker_module
from normbench.tracking.sync import sync
from normbench.tracking.tracker import Tracker
from tests.tracking.ledgers import history, live_run, result, write_ledger

PARAMS = {"depth": 1, "layer": "layernorm", "lr": 1e-3, "seed": 0, "role": "select"}


def _tracker(out) -> Tracker:
    return Tracker(out, "tiny", parent_tags={"recipe": "r", "ledger": ledger_identity(Ledger(None, out).journal)})


def _a_cell(tracker: Tracker, cell: str) -> float:
    """What the worker sends for one cell of 3 epochs; the seconds those calls took."""
    started = time.perf_counter()
    run = tracker.start(live_run(cell, PARAMS))
    for record in history(3):
        tracker.log_epoch(run, record)
    tracker.summarize(run, CellResult.from_summary(result(3), history(3)))
    tracker.close(run)
    return time.perf_counter() - started


def test_a_store_that_refuses_every_write_costs_one_warning_and_no_time(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    [cell, _] = write_ledger(out)
    refused = []

    def broken(*args, **kwargs):
        refused.append(threading.current_thread().name)
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tracker_module.mlflow_store, "open_client", broken)
    tracker = _tracker(out)
    assert _a_cell(tracker, cell) < 0.5 and _a_cell(tracker, cell) < 0.5
    tracker.finish()
    assert refused and set(refused) == {"normbench-mlflow"}  # tried, off the training thread
    err = capsys.readouterr().err
    assert err.count("normbench: warning:") == 1 and "Read-only file system" in err and "normbench sync" in err
    assert not list(out.glob("mlflow-spool*"))  # nothing kept aside: the ledger has it

    monkeypatch.undo()
    assert sync(out).added == 2  # the next sync: every cell


def test_a_slow_store_never_holds_training_up_and_sync_completes_what_it_missed(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    [cell, _] = write_ledger(out)
    log = Tracker._log

    def slow(self, *args):  # a server that answers every batch in 2 s
        time.sleep(2)
        return log(self, *args)

    monkeypatch.setattr(Tracker, "_log", slow)
    tracker = _tracker(out)
    assert _a_cell(tracker, cell) < 0.5  # 5 batches of 2 s queued, none waited for
    started = time.perf_counter()
    tracker.finish(timeout=1.0)
    assert time.perf_counter() - started < 2.5
    assert "did not take the last writes within 1 s" in capsys.readouterr().err

    monkeypatch.undo()
    time.sleep(2.5)  # the batch in flight lands; the thread then writes nothing more
    summary = sync(out)
    assert (summary.added, summary.completed) == (1, 1), summary.line()
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], "tags.trial = '0'")[0]
    assert run.info.status == "FINISHED" and run.data.metrics["test_top1"] == 38.5
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "val_top1")) == [4, 8, 12]
