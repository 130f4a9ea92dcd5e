"""Faults, second round (2): the folder's MLflow store deleted or read-only mid-run is a local fault, not an outage:
named at once with its path (no 300 s wait, no traceback flood); a spool whose run the store does not have is set
aside with one message instead of making every later run exit 1."""

from __future__ import annotations

import datetime
import sqlite3
import time

from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.cli import main
from normbench.errors import ServerUnreachableError
from normbench.tracking.tracker import Tracker
from tests.faults.helpers import assert_invariants, finish, normbench, running, trials, wait_for
from tests.faults.test_spool import RESULT

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]
# a cell of many epochs: the store is deleted after its first flush and found gone at the next, mid-cell
LONG = {"epochs": 100, "batch_size": 64, "warmup_epochs": 0}


def _epoch_logged(out) -> bool:
    """A first epoch in the folder's store, read with plain sqlite3: MLflow's client would keep a pooled connection
    to the deleted file in this process and read it, not the new store, afterwards."""
    conn = sqlite3.connect(f"file:{out / 'mlflow.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM metrics WHERE key = 'train_loss'").fetchone()[0] > 0
    finally:
        conn.close()


def _main(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def test_mlflow_db_deleted_mid_run_is_named_at_once_and_the_next_run_starts_a_new_store(write_suite, tmp_path):
    # 400 epochs, ~20 s a cell idle: the poll below (an MLflow client a turn) must see the first cell in flight
    path, out = write_suite(train={**LONG, "epochs": 400}), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet")
    wait_for(lambda: running(out, "tiny") and _epoch_logged(out), timeout=240, what="the first cell's first epoch")
    (out / "mlflow.db").unlink()
    deleted, deleted_at = time.monotonic(), datetime.datetime.now()
    code, err = finish(proc)
    assert code == 2, err
    assert time.monotonic() - deleted < 120  # named at the next write, not after NORMBENCH_RETRY_SECONDS (300)
    assert f"{out / 'mlflow.db'}: the MLflow store was deleted or moved away" in err, err
    assert "unreachable" not in err and "waiting" not in err, err
    assert not running(out, "tiny")  # the cell in flight went back to the queue

    code, err = finish(normbench("run", path, "--out", out, "--quiet"))
    assert code == 0, err
    # a cell whose run opened before the deletion had that run in the deleted store: one that finished first (a
    # slow poll above, on a loaded machine), or the one in flight if it reached the ledger before the next MLflow
    # write named the deletion (its summary is then set aside in mlflow-spool/unreplayable); a cell put back in the
    # queue ran again under a new trial, after the deletion
    earlier = {t.user_attrs["cell_id"] for t in trials(out, "tiny")
               if t.state == TrialState.COMPLETE and t.datetime_start < deleted_at}
    assert earlier != set(CELLS)  # a cell ran after the store went
    # the new store holds every cell trained after the deletion, once; the ledger and results.csv hold all
    assert_invariants(out, "tiny", CELLS, tracked=[c for c in CELLS if c not in earlier])


def test_a_read_only_store_stops_at_once_naming_it_and_the_cell_goes_back(write_suite, tmp_path, capsys, monkeypatch,
                                                                         one_torch_thread):
    """SQLite opened read-only (`mode=ro`): what a store made read-only mid-run answers, without root tricks."""
    path, out, db = write_suite(), tmp_path / "out", tmp_path / "shared" / "mlflow.db"
    db.parent.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    assert _main(capsys, "run", path, "--out", out, "--quiet")[0] == 0
    grown = write_suite(matrix={"depth": [1, 2], "layer": ["layernorm", "layerscale"], "lr": [1e-3], "seed": [0]})

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///file:{db}?mode=ro&uri=true")
    started = time.monotonic()
    code, err = _main(capsys, "run", grown, "--out", out, "--quiet")
    assert code == 2 and time.monotonic() - started < 120, err
    assert f"{db}: the MLflow store became read-only" in err and "make it writable" in err, err
    assert "unreachable" not in err and "ERROR mlflow" not in err, err
    assert not running(out, "tiny")

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    assert _main(capsys, "run", grown, "--out", out, "--quiet")[0] == 0
    assert_invariants(out, "tiny", sorted([*CELLS, *(c.replace("depth=1", "depth=2") for c in CELLS)]),
                      tracking_uri=f"sqlite:///{db}")


def test_a_spool_whose_run_the_store_lacks_is_set_aside_once_and_runs_go_on(write_suite, tmp_path, capsys,
                                                                           monkeypatch, one_torch_thread):
    """A summary spooled during a server outage, replayed after MLFLOW_TRACKING_URI was unset (or the store it named
    deleted): `Run with id=... not found`, which used to make every later run exit 1."""
    out, elsewhere = tmp_path / "out", tmp_path / "server"
    elsewhere.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{elsewhere / 'mlflow.db'}")
    tracker = Tracker(out, "tiny")
    run_id = tracker.start(CELLS[0], {"depth": 1}, tags={})

    def away(*args, **kwargs):
        raise ServerUnreachableError("the MLflow tracking store is unreachable")

    monkeypatch.setattr(tracker.client, "log_batch", away)
    try:
        tracker.summarize(run_id, RESULT)
    except ServerUnreachableError:
        pass
    assert (out / "mlflow-spool" / f"{run_id}.json").exists()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")

    path = write_suite()
    code, err = _main(capsys, "run", path, "--out", out, "--quiet")
    assert code == 0, err
    assert err.count("name runs that") == 1 and f"{out / 'mlflow-spool' / 'unreplayable'}" in err, err
    assert "MLFLOW_TRACKING_URI they were spooled for" in err
    assert (out / "mlflow-spool" / "unreplayable" / f"{run_id}.json").exists()  # kept, not dropped
    assert not list((out / "mlflow-spool").glob("*.json"))
    code, err = _main(capsys, "run", path, "--out", out, "--quiet")
    assert code == 0 and "name runs that" not in err, err  # said once: the next run is quiet
    assert_invariants(out, "tiny", CELLS)
    server = MlflowClient(f"sqlite:///{elsewhere / 'mlflow.db'}")
    assert server.get_run(run_id).info.status == "RUNNING"  # untouched, for a replay against its own store
