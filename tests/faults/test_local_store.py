"""Faults, second round (2), under the ledger-is-the-truth contract: the folder's MLflow store deleted or made
read-only mid-run stops nothing. Every cell trains into the ledger, the run exits 0 with at most a warning (no
traceback, no wait), and the next `normbench sync` shows every cell in MLflow, once, FINISHED."""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import pandas as pd

from normbench.cli import main
from tests.faults.helpers import assert_invariants, finish, normbench, running, stop_when

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]
# the store is deleted mid-cell: after a cell's first epoch reached it, the run stopped (SIGSTOP) while the cell is
# in flight; it then has most of its epochs (and the next cell) to write into the deleted store
LONG = {"epochs": 20, "batch_size": 64, "warmup_epochs": 0}


def _epoch_logged(out) -> bool:
    """A first epoch in the folder's store, read with plain sqlite3 (no MLflow client kept in this process)."""
    if not (out / "mlflow.db").exists():
        return False
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


def test_mlflow_db_deleted_mid_run_stops_nothing_and_the_next_sync_shows_every_cell(write_suite, tmp_path):
    path, out = write_suite(train=LONG), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet")
    try:
        stop_when(proc, lambda: running(out, "tiny") and _epoch_logged(out), timeout=240,
                  what="a cell in flight with its first epoch in the store")
        (out / "mlflow.db").unlink()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    deleted = time.monotonic()
    code, err = finish(proc, timeout=600)
    assert code == 0, err
    assert sorted(pd.read_csv(out / "results.csv")["cell_id"]) == CELLS  # every cell, in the ledger
    assert "waiting" not in err and "unreachable" not in err, err
    assert time.monotonic() - deleted < 600

    code, err = finish(normbench("sync", out))
    assert code == 0, err
    assert_invariants(out, "tiny", CELLS)  # the store at the path has every cell, whatever the run's sync found


def test_a_read_only_store_stops_nothing_and_a_sync_to_it_made_writable_shows_every_cell(write_suite, tmp_path,
                                                                                         capsys, monkeypatch,
                                                                                         one_torch_thread):
    """SQLite opened read-only (`mode=ro`): what a store made read-only mid-run answers, without root tricks."""
    path, out, db = write_suite(), tmp_path / "out", tmp_path / "shared" / "mlflow.db"
    db.parent.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    assert _main(capsys, "run", path, "--out", out, "--quiet")[0] == 0
    grown = write_suite(matrix={"depth": [1, 2], "layer": ["layernorm", "layerscale"], "lr": [1e-3], "seed": [0]})
    all_cells = sorted([*CELLS, *(c.replace("depth=1", "depth=2") for c in CELLS)])

    # MLflow makes the parent folder of the URI's path as written, `file:/tmp/...`, relative to the working folder:
    # the test's own, not the repository's
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///file:{db}?mode=ro&uri=true")
    started = time.monotonic()
    code, err = _main(capsys, "run", grown, "--out", out, "--quiet")
    assert code == 0 and time.monotonic() - started < 300, err
    assert "readonly" in err.lower() and "normbench sync" in err, err  # said, not waited for
    assert sorted(pd.read_csv(out / "results.csv")["cell_id"]) == all_cells

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    code, err = _main(capsys, "sync", out)
    assert code == 0, err
    assert_invariants(out, "tiny", all_cells, tracking_uri=f"sqlite:///{db}")
