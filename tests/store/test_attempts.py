"""The poison-cell limit: a cell whose attempts keep losing their worker is failed for good after
NORMBENCH_MAX_ATTEMPTS of them, with each attempt's host, pid and verdict; `retry_failed` gives it another round."""

from __future__ import annotations

import os
import time

import pytest
from optuna.trial import TrialState

from normbench.errors import NormbenchError
from normbench.store.attempts import ATTEMPTS, RETRY_ROUND, failed_for_good, reclaim, retry_failed
from normbench.store.ledger import FAILED_FOR_GOOD, Ledger

AXES = {"depth": 1, "layer": "layernorm", "lr": 1e-3, "seed": 0}
CELL = "depth=1,layer=layernorm,lr=0.001,seed=0"


def die_holding_a_claim(tmp_path, study_name: str) -> int:
    """A worker claims the cell and dies: its OS lock is freed, as the kernel frees it when a process is killed."""
    worker = Ledger(None, tmp_path)
    trial = worker.claim(worker.study(study_name))
    assert trial is not None
    worker.close()
    return trial.number


def states(study) -> list[TrialState]:
    return [t.state for t in study.get_trials(deepcopy=False)]


def test_a_cell_that_kills_every_worker_is_failed_for_good_after_max_attempts(tmp_path):
    peer = Ledger(None, tmp_path, max_attempts=2)
    study = peer.study("run:poison")
    peer.enqueue(study, {CELL: AXES})
    first = die_holding_a_claim(tmp_path, "run:poison")
    assert [t.number for t in reclaim(peer, study)] == [first]
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting) == 1 and len(waiting[0].user_attrs[ATTEMPTS]) == 1  # counted, and queued again
    second = die_holding_a_claim(tmp_path, "run:poison")
    reclaim(peer, study)
    assert states(study) == [TrialState.FAIL] * 3  # two lost attempts and the record that ends the round
    [record] = failed_for_good(study)
    assert record.user_attrs[FAILED_FOR_GOOD] and record.user_attrs["cell_id"] == CELL
    attempts = record.user_attrs[ATTEMPTS]
    assert [a["trial"] for a in attempts] == [first, second]
    assert all(a["pid"] == os.getpid() and a["host"] and "OS lock" in a["verdict"] for a in attempts)
    assert peer.enqueue(study, {CELL: AXES}) == 0  # a starting worker does not feed it to the fleet again
    assert peer.claim(study) is None


def test_a_peer_with_a_stale_view_of_the_same_dead_claim_does_not_count_it_again(tmp_path, monkeypatch):
    a, b = Ledger(None, tmp_path, max_attempts=2), Ledger(None, tmp_path, max_attempts=2)
    study_a, study_b = a.study("run:race"), b.study("run:race")
    a.enqueue(study_a, {CELL: AXES})
    die_holding_a_claim(tmp_path, "run:race")
    seen = study_b.get_trials(deepcopy=True)  # b looked before a reclaimed: both saw the claim RUNNING
    reclaim(a, study_a)
    monkeypatch.setattr(study_b, "get_trials", lambda deepcopy=False, states=None: [
        t for t in seen if states is None or t.state in states])
    assert reclaim(b, study_b) == []  # its FAIL does not land: a counted the attempt
    waiting = study_a.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting) == 1 and len(waiting[0].user_attrs[ATTEMPTS]) == 1


def test_retry_failed_gives_another_round_and_keeps_the_earlier_one(tmp_path):
    peer = Ledger(None, tmp_path, max_attempts=1)
    study = peer.study("run:again")
    peer.enqueue(study, {CELL: AXES})
    die_holding_a_claim(tmp_path, "run:again")
    reclaim(peer, study)
    assert retry_failed(peer, study) == [CELL]
    assert failed_for_good(study) == [] and retry_failed(peer, study) == []  # queued once
    [waiting] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert waiting.user_attrs[RETRY_ROUND] == 1 and ATTEMPTS not in waiting.user_attrs
    die_holding_a_claim(tmp_path, "run:again")
    reclaim(peer, study)
    [record] = failed_for_good(study)
    assert record.user_attrs[RETRY_ROUND] == 1 and len(record.user_attrs[ATTEMPTS]) == 1
    assert len([t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(FAILED_FOR_GOOD)]) == 2


def test_a_cell_given_back_on_ctrl_c_is_not_an_attempt(tmp_path):
    ledger = Ledger(None, tmp_path, max_attempts=1)
    study = ledger.study("run:stop")
    ledger.enqueue(study, {CELL: AXES})
    ledger.claim(study).release()
    assert states(study) == [TrialState.FAIL, TrialState.WAITING] and failed_for_good(study) == []
    assert ATTEMPTS not in study.get_trials(deepcopy=False)[1].user_attrs


@pytest.mark.parametrize("value", ["0", "three", "-1"])
def test_a_bad_max_attempts_names_the_variable_and_the_fix(tmp_path, monkeypatch, value):
    monkeypatch.setenv("NORMBENCH_MAX_ATTEMPTS", value)
    with pytest.raises(NormbenchError, match="NORMBENCH_MAX_ATTEMPTS=.*1 or more.*unset it"):
        Ledger(None, tmp_path)


def test_a_database_ledger_counts_heartbeat_verdicts(fresh_postgres_url, tmp_path, monkeypatch):
    monkeypatch.setenv("NORMBENCH_HOST", "node-a")
    # a grace of 4 s: a loaded machine's client that stalls mid-transaction past the grace (the server's idle
    # timeout) reconnects in well under 4 - 2 x 1 s, so that blip does not hold off the verdict
    dead = Ledger(fresh_postgres_url, tmp_path, heartbeat_interval=1, grace_period=4)
    study = dead.study("run:stale")
    dead.enqueue(study, {CELL: AXES})
    assert dead.claim(study) is not None  # then silence: no heartbeat thread, as if OOM-killed right here
    time.sleep(4.5)
    monkeypatch.setenv("NORMBENCH_HOST", "node-b")
    peer = Ledger(fresh_postgres_url, tmp_path, heartbeat_interval=1, grace_period=4, max_attempts=1)
    assert len(reclaim(peer, peer.study("run:stale"))) == 1
    [record] = failed_for_good(peer.study("run:stale"))
    [attempt] = record.user_attrs[ATTEMPTS]
    assert attempt["host"] == "node-a" and "no heartbeat for over 4 s" in attempt["verdict"]
    assert attempt["noticed_by"].startswith("node-b")


def test_a_claim_not_signed_yet_is_not_judged_by_the_lock_its_copy_inherited(tmp_path):
    """A re-queued copy once kept its dead predecessor's `worker_lock`: a peer that read it between the claim (RUNNING)
    and the claimer's signature judged the live claimer dead by that lock, failed its cell and queued it again, so a
    poison cell's round counted an attempt more than NORMBENCH_MAX_ATTEMPTS (the poison-cell test, under load)."""
    peer = Ledger(None, tmp_path)
    study = peer.study("run:copy")
    peer.enqueue(study, {CELL: AXES})
    die_holding_a_claim(tmp_path, "run:copy")
    reclaim(peer, study)
    [copy] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert "worker_lock" not in copy.user_attrs  # a copy names no worker: its claimer signs it
    # a copy queued before that (an older ledger) still names the dead lock: claimed, not signed yet
    peer.storage.set_trial_user_attr(copy._trial_id, "worker_lock",
                                     study.get_trials(deepcopy=False)[0].user_attrs["worker_lock"])
    assert peer.storage.set_trial_state_values(copy._trial_id, state=TrialState.RUNNING)
    assert reclaim(peer, study) == []  # its claimer is not judged by a lock it has not written
    assert peer.storage.get_trial(copy._trial_id).state == TrialState.RUNNING
