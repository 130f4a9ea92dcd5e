"""One suite's workers touch only that suite: every claim checks the study still carries the suite and recipe the
worker serves (a study replaced mid-run by another team's, or a mistyped --storage, is refused by name), and a claim
its worker never signed (killed between claim and start, or an answer the network lost) is queued again without
counting as an attempt that killed its worker."""

from __future__ import annotations

import datetime
import os

import pytest
from optuna.trial import FrozenTrial, TrialState

from normbench.errors import NormbenchError
from normbench.store.attempts import ATTEMPTS, reclaim
from normbench.store.ledger import SUITE, Ledger, worker_host
from normbench.store.locks import LifeLock

AXES = {"depth": 1, "layer": "layernorm", "lr": 1e-3, "seed": 0}
CELL = "depth=1,layer=layernorm,lr=0.001,seed=0"


def queued(tmp_path, suite: str = "a", recipe: str = "r1", name: str = "run:a"):
    ledger = Ledger(None, tmp_path)
    ledger.serve(suite, recipe)
    study = ledger.study(name)
    ledger.enqueue(study, {CELL: AXES})
    return ledger, study


def test_a_new_study_is_stamped_with_the_suite_and_recipe_served(tmp_path):
    _, study = queued(tmp_path)
    assert study.user_attrs[SUITE] == "a" and study.user_attrs["recipe"] == "r1"


def test_a_claim_from_a_study_restamped_for_another_recipe_mid_run_is_refused(tmp_path):
    ledger, study = queued(tmp_path)
    Ledger(None, tmp_path).study("run:a").set_user_attr("recipe", "r2")  # another team's suite of the same name
    with pytest.raises(NormbenchError, match=r"belongs to suite `a` with recipe r2, not to `a` with recipe r1"):
        ledger.claim(study)
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.WAITING]  # nothing touched


def test_a_worker_of_another_suite_claims_nothing(tmp_path):
    _, study = queued(tmp_path)
    other = Ledger(None, tmp_path)
    other.serve("b", "r1")
    with pytest.raises(NormbenchError, match="belongs to suite `a`"):
        other.claim(other.study("run:a"))
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.WAITING]


def test_an_unstamped_study_of_an_older_ledger_is_known_by_its_name(tmp_path):
    Ledger(None, tmp_path).enqueue(Ledger(None, tmp_path).study("bracket:a:1"), {CELL: AXES})  # no stamp
    mine, theirs = Ledger(None, tmp_path), Ledger(None, tmp_path)
    mine.serve("a", "r1")
    theirs.serve("ab", "r1")
    with pytest.raises(NormbenchError, match="belongs to suite `\\?`"):
        theirs.claim(theirs.study("bracket:a:1"))
    assert mine.claim(mine.study("bracket:a:1")) is not None


def claimed(study, *, started_ago: float, **signed):
    """A RUNNING copy of the cell claimed `started_ago` seconds ago (Optuna's public API: a FrozenTrial added to
    the study), signed with `signed` (worker_host, worker_pid, worker_lock) or, without them, never signed."""
    study.add_trial(FrozenTrial(
        number=0, trial_id=0, state=TrialState.RUNNING, value=None, datetime_complete=None, params={},
        distributions={}, system_attrs={}, intermediate_values={}, user_attrs={"cell_id": CELL, "axes": AXES, **signed},
        datetime_start=datetime.datetime.now() - datetime.timedelta(seconds=started_ago)))
    return study.get_trials(deepcopy=False)[-1]


def test_a_claim_never_signed_is_queued_again_without_counting_an_attempt(tmp_path):
    ledger = Ledger(None, tmp_path, grace_period=60)
    study = ledger.study("run:a")
    unsigned = claimed(study, started_ago=61)  # the worker died between its claim and its first write
    assert [t.number for t in reclaim(ledger, study)] == [unsigned.number]
    [again] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert again.user_attrs["cell_id"] == CELL and ATTEMPTS not in again.user_attrs
    assert study.get_trials(deepcopy=False)[unsigned.number].state == TrialState.FAIL


def test_a_claim_its_worker_signs_after_a_peer_read_it_unsigned_is_left_to_that_worker(tmp_path, monkeypatch):
    """The race a busy machine opens: a peer reads the claim unsigned and past the grace, then the slow worker signs it
    and starts the cell. Failing it from that read would re-queue the cell beside a worker that trains it (or, a
    poison cell, dies of it: one lost attempt more than the ledger counts)."""
    ledger = Ledger(None, tmp_path, grace_period=60)
    study = ledger.study("run:a")
    slow = claimed(study, started_ago=61)
    stale = ledger.trials(study, (TrialState.RUNNING,))  # what the peer read
    ledger.storage.set_trial_user_attr(ledger.ids.of(study, slow.number), "worker_pid", 4242)  # the worker signs
    monkeypatch.setattr(ledger, "trials", lambda *a, **k: stale)
    assert reclaim(ledger, study) == []
    assert study.get_trials(deepcopy=False)[slow.number].state == TrialState.RUNNING
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def test_a_claim_unsigned_within_the_grace_is_left_to_its_worker(tmp_path):
    ledger = Ledger(None, tmp_path, grace_period=60)
    study = ledger.study("run:a")
    claimed(study, started_ago=5)  # claimed a moment ago: its worker is signing it
    assert reclaim(ledger, study) == []
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.RUNNING]


def test_the_grace_for_an_unsigned_claim_is_the_ledgers_heartbeat_grace(tmp_path):
    ledger = Ledger(None, tmp_path, grace_period=10)  # NORMBENCH_HEARTBEAT_GRACE=10
    study = ledger.study("run:a")
    within, past = claimed(study, started_ago=8), claimed(study, started_ago=12)
    assert [t.number for t in reclaim(ledger, study)] == [past.number]
    assert study.get_trials(deepcopy=False)[within.number].state == TrialState.RUNNING


def test_a_claim_whose_os_lock_is_held_is_never_taken_however_old(tmp_path):
    """Signed (host, pid and the claimer's OS lock): the lock decides, not the time since the claim."""
    ledger, lock = Ledger(None, tmp_path, grace_period=60), LifeLock(tmp_path)
    study = ledger.study("run:a")
    claimed(study, started_ago=3600, worker_host=worker_host(), worker_pid=os.getpid(), worker_lock=lock.path.name)
    assert reclaim(ledger, study) == []
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.RUNNING]


def test_a_claim_whose_os_lock_is_free_is_taken_at_once_and_counted(tmp_path):
    ledger, lock = Ledger(None, tmp_path, grace_period=60), LifeLock(tmp_path)
    study = ledger.study("run:a")
    lock.release()  # its worker process ended
    dead = claimed(study, started_ago=1, worker_host=worker_host(), worker_pid=4242, worker_lock=lock.path.name)
    assert [t.number for t in reclaim(ledger, study)] == [dead.number]
    [again] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    [attempt] = again.user_attrs[ATTEMPTS]  # the cell ran, so the death may be its doing: counted
    assert attempt["pid"] == 4242 and f"OS lock {lock.path.name} found free" in attempt["verdict"]
