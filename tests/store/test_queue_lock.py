"""Workers that start at once on a PostgreSQL ledger queue each cell once: the queue lock serializes the check and
the inserts (without it each sees the cells missing and queues them again)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import sqlalchemy
from optuna.trial import TrialState

import normbench.store.ledger as ledger_module
from normbench.store.ledger import Ledger
from normbench.store.queue_lock import lock_key, queue_lock
from tests.conftest import REPO

pytestmark = pytest.mark.postgres

CELLS = {f"depth=2,layer=layernorm,lr=0.001,seed={seed}": {"depth": 2, "layer": "layernorm", "lr": 1e-3,
                                                          "seed": seed} for seed in range(6)}


def _slow_inserts(monkeypatch):
    """Widen the window between a worker's check and its inserts, as a loaded machine does."""
    real = ledger_module.add_waiting_trial

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(ledger_module, "add_waiting_trial", slow)


def _enqueue_at_once(url, tmp_path, workers=3):
    ledgers = [Ledger(url, tmp_path) for _ in range(workers)]
    studies = [ledger.study("run:race") for ledger in ledgers]
    start = threading.Barrier(workers)
    queued = [0] * workers

    def work(i):
        start.wait()
        queued[i] = ledgers[i].enqueue(studies[i], CELLS)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return queued, studies[0].get_trials(deepcopy=False)


def test_workers_queueing_at_once_queue_each_cell_once(fresh_postgres_url, tmp_path, monkeypatch):
    _slow_inserts(monkeypatch)
    queued, trials = _enqueue_at_once(fresh_postgres_url, tmp_path)
    assert sorted(queued) == [0, 0, len(CELLS)]  # one worker queued them all, the others found them queued
    assert Counter(t.user_attrs["cell_id"] for t in trials) == Counter(CELLS.keys())
    assert all(t.state == TrialState.WAITING for t in trials)


def holders(url: str, study_name: str) -> list[int]:
    """The server pids of the sessions that hold the study's queue lock (pg_locks: a bigint advisory key is split
    into classid, its high 32 bits, and objid, its low 32 bits)."""
    key = lock_key(study_name) & (2**64 - 1)
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return sorted(connection.execute(sqlalchemy.text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                "AND classid::bigint = :high AND objid::bigint = :low "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
                {"high": key >> 32, "low": key & 0xFFFFFFFF}).scalars())
    finally:
        engine.dispose()


def test_a_lock_held_past_the_wait_is_stepped_over_and_a_released_one_is_taken(fresh_postgres_url, tmp_path):
    ledger = Ledger(fresh_postgres_url, tmp_path)
    assert holders(fresh_postgres_url, "run:held") == []
    with queue_lock(ledger.storage, ledger.outage, "run:held"):  # a stalled holder, in the story
        [stalled] = holders(fresh_postgres_url, "run:held")
        began = time.monotonic()
        with queue_lock(ledger.storage, ledger.outage, "run:held", wait_seconds=0.5):
            waited = time.monotonic() - began
            assert holders(fresh_postgres_url, "run:held") == [stalled]  # runs without it: the holder keeps it
        assert waited >= 0.5  # after waiting its wait for it
    assert holders(fresh_postgres_url, "run:held") == []  # given back with the block (its session lives on)
    with queue_lock(ledger.storage, ledger.outage, "run:held", wait_seconds=60):
        assert len(holders(fresh_postgres_url, "run:held")) == 1  # free: taken, not stepped over
    assert holders(fresh_postgres_url, "run:held") == []


# lock_key("run:a") as every normbench computes it, whatever the process: pinned so that a change of the key (which
# would let workers of two versions queue at once) is a decision, not an accident
RUN_A_KEY = -7575560842076661547


def test_the_key_is_a_signed_64_bit_integer_stable_per_study():
    assert lock_key("run:a") == RUN_A_KEY and lock_key("run:b") != RUN_A_KEY
    assert -(2**63) <= lock_key("run:b") < 2**63


def test_workers_in_other_processes_compute_the_same_key():
    """Two workers are two processes: a key from Python's salted hash() would differ between them (and they would
    take different locks). Each process here has its own hash seed."""
    code = "from normbench.store.queue_lock import lock_key; print(lock_key('run:a'))"
    keys = {int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                               env={**os.environ, "PYTHONHASHSEED": seed}).stdout) for seed in ("0", "1")}
    assert keys == {RUN_A_KEY}
