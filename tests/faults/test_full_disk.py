"""Faults, second round (3): a disk that fills up mid-cell is named at once with the ledger's path (not waited out as
an outage), the cell in flight is given back in the ledger (the folder's 1 MiB reserve, freed at the first full
write, makes room for that), and no temporary file is left behind. MLflow is a view of the ledger: a full MLflow store
alone stops nothing, and the next sync fills it in. A real full disk needs a tmpfs
mount (root); the simulated one (SQLite's page limit, lifted when the reserve is freed) runs everywhere;
scripts/disk-full-by-hand.sh reproduces the real one by hand."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy
from mlflow.tracking import MlflowClient

from normbench.cli import main
from normbench.store import reserve
from normbench.store.journal import LedgerWriteError, SafeJournalFileBackend
from normbench.tracking import tracker
from tests.faults.helpers import assert_invariants, finish, mount_tmpfs, normbench, running, stop_when, unmount

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]
# the disk is filled mid-cell: the run is stopped (SIGSTOP) while a cell that logged an epoch is in flight, and goes
# on once the disk is full. An epoch's ledger record (~150 bytes) fills the journal's last page (4 KiB) before it
# needs a page the disk no longer has: a cell of 50 epochs has that many (~30) left when its first epoch is logged
LONG = {"epochs": 50, "batch_size": 64, "warmup_epochs": 0}


def _running_runs(out: Path) -> list[str]:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    return [r.info.run_id for r in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")]


# the write that stops the run is the ledger's (MLflow's live writes only warn: tracking/tracker.py)
FULL = {"ledger.journal": ": cannot write the ledger (No space left on device); the disk is full: free space"}


def _assert_stopped_cleanly(out: Path, err: str, since: float, first: tuple[str, ...] = tuple(FULL)) -> None:
    assert time.monotonic() - since < 120, "named at the next write, not after NORMBENCH_RETRY_SECONDS (300)"
    assert any(f"{out / name}{FULL[name]}" in err for name in first), err
    assert "free space, then run the same command to resume" in err, err
    assert "unreachable" not in err and "waiting" not in err and "torn last record" not in err, err
    assert not running(out, "tiny")  # the cell in flight was given back to the queue (its MLflow run: the next sync's)
    assert not (out / reserve.RESERVE).exists()  # spent on the way out
    assert not list(out.rglob("*.tmp"))


# --------------------------------------------------------------------------------------------- a real full disk


def _fill(path: Path) -> None:
    # unbuffered: a write the disk took part of leaves nothing behind for close() to flush (and fail on) again
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as e:
            assert e.errno == errno.ENOSPC


def _epoch_logged(out: Path) -> bool:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    return exp is not None and any("train_loss" in r.data.metrics for r in client.search_runs([exp.experiment_id]))


def test_a_real_disk_filling_up_mid_cell_stops_at_once_and_gives_the_cell_back(write_suite, tmp_path):
    out = tmp_path / "full"
    no_mount = mount_tmpfs(out, "16m")
    if no_mount is not None:
        pytest.skip(f"a real full disk needs a tmpfs mount: {no_mount}; the simulated test below covers the same "
                    "code, and scripts/disk-full-by-hand.sh reproduces it by hand")
    try:
        path = write_suite(train=LONG)
        proc = normbench("run", path, "--out", out, "--quiet")
        try:
            stop_when(proc, lambda: running(out, "tiny") and _epoch_logged(out), timeout=240,
                      what="a cell in flight with its first epoch logged")
            _fill(out / "filler")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        filled = time.monotonic()
        code, err = finish(proc)
        assert code == 2, err
        _assert_stopped_cleanly(out, err, filled)

        (out / "filler").unlink()
        code, err = finish(normbench("run", path, "--out", out, "--quiet"))
        assert code == 0, err
        assert_invariants(out, "tiny", CELLS)
        assert (out / reserve.RESERVE).stat().st_size == reserve.RESERVE_BYTES  # kept again
    finally:
        unmount(out)


# ---------------------------------------------------------------------------------------- a simulated full disk


class FullStore:
    """SQLite's own "database or disk is full", for every MLflow connection: `max_page_count` pinned to the pages
    the store has, from when `fill()` is called until the reserve is freed (which frees room on a real disk)."""

    def __init__(self) -> None:
        self.full = False

    def checkout(self, dbapi_conn, record, proxy) -> None:
        cur = dbapi_conn.cursor()
        limit = cur.execute("PRAGMA page_count").fetchone()[0] if self.full else 1073741823
        cur.execute(f"PRAGMA max_page_count = {limit}")
        cur.close()


def test_a_simulated_mlflow_store_filling_up_mid_cell_stops_nothing_and_the_next_sync_fills_it_in(
        write_suite, tmp_path, capsys, monkeypatch, one_torch_thread):
    out, store = tmp_path / "out", FullStore()
    log_epoch, filled = tracker.Tracker.log_epoch, []

    def filling(self, run_id, record):
        if record["epoch"] == 3 and not filled:
            store.full = True
            filled.append(time.monotonic())
        return log_epoch(self, run_id, record)

    monkeypatch.setattr(tracker.Tracker, "log_epoch", filling)
    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "checkout", store.checkout)
    try:
        path = write_suite(train={**LONG, "batch_size": 256})
        code = main(["run", str(path), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert code == 0 and "Traceback" not in err, err  # every cell trained into the ledger
        assert filled and "database or disk is full" in err and "normbench sync" in err, err
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "checkout", store.checkout)
    assert main(["sync", str(out)]) == 0  # room again: the view is rebuilt from the ledger
    assert_invariants(out, "tiny", CELLS)


def test_a_journal_write_the_disk_refuses_names_the_journal_and_frees_the_reserve(tmp_path, monkeypatch):
    journal = tmp_path / "ledger.journal"
    backend = SafeJournalFileBackend(str(journal))
    reserve.keep(tmp_path)
    real_fsync = os.fsync

    def full(fd):
        if os.path.samefile(f"/proc/self/fd/{fd}", journal):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(LedgerWriteError) as raised:
        backend.append_logs([{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}])
    assert str(raised.value).startswith(f"{journal}: cannot write the ledger (No space left on device); the disk is "
                                        "full: free space, then run the same command to resume")
    assert not (tmp_path / reserve.RESERVE).exists()  # freed: room for the way out
    assert not os.path.lexists(f"{journal}.lock")  # the lock is not left behind
    monkeypatch.setattr(os, "fsync", real_fsync)
    backend.append_logs([{"op_code": 0, "worker_id": "w", "study_name": "t", "directions": [1]}])
    assert [json.loads(line)["study_name"] for line in journal.read_bytes().splitlines()][-1] == "t"
