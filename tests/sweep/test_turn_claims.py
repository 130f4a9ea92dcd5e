"""sweep/turn_claims.py: a worker's turn claims the first queued cell and its fused group, and a search bounded in
flight (Job.max_in_flight) is counted and claimed under its own lock, so workers that claim together never pass it."""

from __future__ import annotations

import threading
import time

from normbench.contracts.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep import turn_claims
from normbench.sweep.fuse_plan import FusePlan
from normbench.sweep.tune import open_tune

GROUPS_OF_4 = FusePlan(k=4, min_k=2, wait_s=0.0)


def search_suite(write_suite, trials: int = 6):  # noqa: ANN001, ANN201
    return load_suite(write_suite(name="tt", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                                  tune={"trials": trials, "sampler": "tpe", "startup_trials": 2,
                                        "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}))


def test_a_group_takes_no_more_than_the_searchs_room(write_suite, tmp_path):
    suite = search_suite(write_suite)
    ledger = Ledger(None, tmp_path)
    jobs = open_tune(suite, ledger, tmp_path, quiet=True)[0].jobs()
    job, claims = turn_claims.claim_turn(ledger, jobs, GROUPS_OF_4, fusable=lambda c: True, wait=False)
    assert len(claims) == 2 and turn_claims.room(job, ledger) == 0  # startup_trials = 2 in flight
    assert turn_claims.claim_turn(ledger, jobs, GROUPS_OF_4, fusable=lambda c: True, wait=False) is None
    assert turn_claims.claim_turn(ledger, jobs, FusePlan(k=1), fusable=lambda c: True, wait=False) is None  # unfused
    claims[0].release()
    _, more = turn_claims.claim_turn(ledger, jobs, GROUPS_OF_4, fusable=lambda c: True, wait=False)
    assert len(more) == 1  # room for one again


def test_workers_claiming_together_never_pass_a_searchs_in_flight_bound(write_suite, tmp_path, monkeypatch):
    """Two fused workers (each its own ledger connection) count the search's running cells at the same moment: the
    lock makes the second count after the first has claimed, so 2 cells train, not 2 + 2."""
    suite = search_suite(write_suite)
    ledgers = [Ledger(None, tmp_path), Ledger(None, tmp_path)]
    plans = [open_tune(suite, ledger, tmp_path, quiet=True)[0] for ledger in ledgers]
    counted = turn_claims.room

    def slow_room(job, ledger):  # noqa: ANN001, ANN202 - a wide window between counting and claiming
        left = counted(job, ledger)
        time.sleep(0.5)
        return left

    monkeypatch.setattr(turn_claims, "room", slow_room)
    taken: list[int] = []

    def worker(ledger: Ledger, jobs: list) -> None:
        turn = turn_claims.claim_turn(ledger, jobs, GROUPS_OF_4, fusable=lambda c: True, wait=False)
        taken.append(0 if turn is None else len(turn[1]))

    threads = [threading.Thread(target=worker, args=(ledger, plan.jobs()))
               for ledger, plan in zip(ledgers, plans, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(taken) == [0, 2], taken
