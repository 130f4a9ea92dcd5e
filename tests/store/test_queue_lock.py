"""Workers that start at once on a PostgreSQL ledger queue each cell once: the queue lock serializes the check and
the inserts (without it each sees the cells missing and queues them again)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from optuna.trial import TrialState

import normbench.store.ledger as ledger_module
from normbench.store.ledger import Ledger
from normbench.store.queue_lock import lock_key, queue_lock

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


def test_a_lock_held_past_the_wait_is_stepped_over(fresh_postgres_url, tmp_path):
    ledger = Ledger(fresh_postgres_url, tmp_path)
    with queue_lock(ledger.storage, ledger.outage, "run:held"):  # a stalled holder, in the story
        began = time.monotonic()
        with queue_lock(ledger.storage, ledger.outage, "run:held", wait_seconds=0.5):
            waited = time.monotonic() - began
    assert 0.5 <= waited < 5
    began = time.monotonic()
    with queue_lock(ledger.storage, ledger.outage, "run:held", wait_seconds=5):  # released: taken at once
        assert time.monotonic() - began < 2


def test_the_key_is_a_signed_64_bit_integer_stable_per_study():
    assert lock_key("run:a") == lock_key("run:a") != lock_key("run:b")
    assert -(2**63) <= lock_key("run:a") < 2**63
