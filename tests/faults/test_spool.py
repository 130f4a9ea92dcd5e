"""A summary the tracking server could not take within the budget is spooled and logged by the next Tracker."""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

from normbench.errors import ServerUnreachableError
from normbench.spec.results import CellResult
from normbench.tracking.tracker import Tracker

RESULT = CellResult.from_summary({"best_val_top1": 0.8, "final_val_top1": 0.75, "status": "ok", "epochs_run": 2,
                                  "images_per_sec": 100.0, "params": 1234, "seconds": 1.5})


def test_a_spooled_summary_is_logged_and_the_run_closed_by_the_next_tracker(tmp_path, monkeypatch):
    tracker = Tracker(tmp_path, "spool")
    run_id = tracker.start("depth=1,layer=layernorm", {"depth": 1}, tags={})
    tracker._last_flush[run_id] = time.monotonic()  # the epoch stays buffered: it goes with the summary
    tracker.log_epoch(run_id, {"epoch": 0, "val_top1": 0.5, "train_loss": 1.0})

    def away(*args, **kwargs):
        raise ServerUnreachableError("the MLflow tracking store is unreachable")

    monkeypatch.setattr(tracker.client, "log_batch", away)
    with pytest.raises(ServerUnreachableError):
        tracker.summarize(run_id, RESULT)
    assert [p.name for p in (tmp_path / "mlflow-spool").iterdir()] == [f"{run_id}.json"]

    Tracker(tmp_path, "spool")  # the next run: the server is back
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "ok"
    assert run.data.metrics["best_val_top1"] == 0.8 and run.data.metrics["val_top1"] == 0.5  # the buffered epoch too
    assert not list((tmp_path / "mlflow-spool").glob("*.json"))
