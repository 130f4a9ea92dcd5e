"""The poison-cell limit: a cell whose attempts keep losing their worker is failed for good after
NORMBENCH_MAX_ATTEMPTS of them, with each attempt's host, pid and verdict; `retry_failed` gives it another round. An
attempt lost after its checkpoint moved on (preempted while progressing) is not counted and starts the row again."""

from __future__ import annotations

import os
import threading
import time

import pytest
from optuna.trial import TrialState

from normbench.errors import NormbenchError
from normbench.store.attempts import ATTEMPTS, PREEMPTED, RETRY_ROUND, failed_for_good, reclaim, retry_failed
from normbench.store.ledger import FAILED_FOR_GOOD, Ledger

AXES = {"depth": 1, "layer": "layernorm", "lr": 1e-3, "seed": 0}
CELL = "depth=1,layer=layernorm,lr=0.001,seed=0"


def die_holding_a_claim(tmp_path, study_name: str, checkpoint_step: int | None = None) -> int:
    """A worker claims the cell and dies: its OS lock is freed, as the kernel frees it when a process is killed.
    With `checkpoint_step`, its last checkpoint record (as sweep/checkpoints.py writes it) stands at that step."""
    worker = Ledger(None, tmp_path)
    trial = worker.claim(worker.study(study_name))
    assert trial is not None
    if checkpoint_step is not None:
        trial.set_attr("checkpoint", {"file": "run_x/cell/checkpoint.pt", "epoch": checkpoint_step // 10, "batch": 0,
                                      "step": checkpoint_step})
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


def start_a_worker_after_each_fail(ledger, starting, study_name: str) -> list[int]:
    """Make `ledger`'s FAILs start a worker (`starting`) that queues the cell at once, and wait a second for it: the
    window between a FAIL and its copy. Returns what that worker queued."""
    queued: list[int] = []
    fail_trial = ledger.fail_trial

    def fail_then_let_a_worker_start(trial_id):
        landed = fail_trial(trial_id)
        worker = threading.Thread(target=lambda: queued.append(starting.enqueue(starting.study(study_name),
                                                                               {CELL: AXES})))
        worker.start()
        worker.join(timeout=1.0)
        fail_then_let_a_worker_start.worker = worker
        return landed

    ledger.fail_trial = fail_then_let_a_worker_start
    return queued


def test_a_worker_starting_between_a_lost_attempts_fail_and_its_copy_does_not_queue_the_cell_afresh(tmp_path):
    """Reclaiming is two writes (the FAIL, then the copy or the record that ends the round). A worker that started
    between them and queued the matrix saw the cell with no live trial and queued it afresh: a second round past
    NORMBENCH_MAX_ATTEMPTS (seen in CI). The starting worker's queueing now waits until both writes landed."""
    peer, starting = Ledger(None, tmp_path, max_attempts=1), Ledger(None, tmp_path)
    study = peer.study("run:window")
    peer.enqueue(study, {CELL: AXES})
    die_holding_a_claim(tmp_path, "run:window")
    queued = start_a_worker_after_each_fail(peer, starting, "run:window")
    reclaim(peer, study)
    peer.fail_trial.worker.join(timeout=30)
    assert queued == [0]  # it waited for the record that ends the round, and queued nothing
    assert states(study) == [TrialState.FAIL] * 2 and len(failed_for_good(study)) == 1


def test_a_worker_starting_while_a_claim_is_given_back_does_not_queue_a_second_copy(tmp_path):
    """Ctrl-C's give-back is the same two writes: the FAIL, then its WAITING copy."""
    worker, starting = Ledger(None, tmp_path), Ledger(None, tmp_path)
    study = worker.study("run:give-back")
    worker.enqueue(study, {CELL: AXES})
    claim = worker.claim(study)
    queued = start_a_worker_after_each_fail(worker, starting, "run:give-back")
    claim.release()
    worker.fail_trial.worker.join(timeout=30)
    assert queued == [0] and states(study) == [TrialState.FAIL, TrialState.WAITING]


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


def test_a_database_ledger_counts_heartbeat_verdicts_of_attempts_that_made_no_progress(fresh_postgres_url, tmp_path):
    """On PostgreSQL (a heartbeat's verdict; the start read back by storage id): an attempt silent after moving the
    checkpoint to step 10 is kept apart; the next, silent at step 10 still, counts, and ends the round at a limit of 1.
    (Its own name starts with the heartbeat test's: conftest's SERIAL entry covers both.)"""
    dead = Ledger(fresh_postgres_url, tmp_path, heartbeat_interval=1, grace_period=4)
    peer = Ledger(fresh_postgres_url, tmp_path, heartbeat_interval=1, grace_period=4, max_attempts=1)
    study = dead.study("run:stale")
    dead.enqueue(study, {CELL: AXES})
    for checkpoint_step in (10, None):  # the second attempt writes nothing: its record is the one it started from
        claim = dead.claim(dead.study("run:stale"))
        assert claim is not None  # then silence, as if killed right after its last checkpoint
        if checkpoint_step is not None:
            claim.set_attr("checkpoint", {"epoch": 1, "batch": 0, "step": checkpoint_step})
        time.sleep(4.5)
        assert len(reclaim(peer, peer.study("run:stale"))) == 1
    [record] = failed_for_good(peer.study("run:stale"))
    [preempted], [counted] = record.user_attrs[PREEMPTED], record.user_attrs[ATTEMPTS]
    assert "no heartbeat" in preempted["verdict"] and "(the start to epoch 1)" in preempted["verdict"]
    assert "moved on" not in counted["verdict"]


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


def test_a_cell_whose_checkpoint_moves_on_in_each_lost_attempt_is_never_failed_for_good(tmp_path):
    """Preempted five times (a spot fleet, SLURM --requeue), each time after a newer checkpoint: with a limit of 2,
    each attempt is kept apart and uncounted, and the cell stays queued, resuming from its newest checkpoint."""
    peer = Ledger(None, tmp_path, max_attempts=2)
    study = peer.study("run:preempted")
    peer.enqueue(study, {CELL: AXES})
    for i, step in enumerate((30, 60, 90, 120, 150), 1):
        die_holding_a_claim(tmp_path, "run:preempted", checkpoint_step=step)
        assert len(reclaim(peer, study)) == 1
        [waiting] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        assert waiting.user_attrs["checkpoint"]["step"] == step  # the next attempt resumes there
        assert ATTEMPTS not in waiting.user_attrs and len(waiting.user_attrs[PREEMPTED]) == i
    assert failed_for_good(study) == []
    preempted = waiting.user_attrs[PREEMPTED]
    assert "its checkpoint moved on (the start to epoch 3)" in preempted[0]["verdict"]
    assert "(epoch 12 to epoch 15): preempted while progressing, not counted" in preempted[-1]["verdict"]
    assert all(a["pid"] == os.getpid() and "OS lock" in a["verdict"] for a in preempted)


def test_a_cell_that_dies_at_the_same_checkpoint_is_failed_for_good_after_max_attempts(tmp_path):
    """The poison cell with a checkpoint: it moved on once (uncounted), then died twice at that same step without
    writing a newer one: failed for good at the limit of 2, and `--retry-failed` starts a clean round."""
    peer = Ledger(None, tmp_path, max_attempts=2)
    study = peer.study("run:stuck")
    peer.enqueue(study, {CELL: AXES})
    die_holding_a_claim(tmp_path, "run:stuck", checkpoint_step=50)  # progressing: uncounted
    reclaim(peer, study)
    stuck = []
    for _ in range(2):
        stuck.append(die_holding_a_claim(tmp_path, "run:stuck"))  # the record it carries: step 50, unmoved
        reclaim(peer, study)
    [record] = failed_for_good(study)
    assert [a["trial"] for a in record.user_attrs[ATTEMPTS]] == stuck and len(record.user_attrs[PREEMPTED]) == 1
    assert retry_failed(peer, study) == [CELL]
    [waiting] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert ATTEMPTS not in waiting.user_attrs and PREEMPTED not in waiting.user_attrs
    assert waiting.user_attrs["checkpoint"]["step"] == 50  # the new round resumes from it all the same


@pytest.mark.parametrize("steps, preempted, counted", [((80, 40), 1, 1), ((80, 80), 1, 1), ((0, 0), 0, 2)])
def test_a_checkpoint_not_past_the_one_the_attempt_started_from_is_no_progress(tmp_path, steps, preempted, counted):
    """(80, 40): the checkpoint was set aside (another recipe, truncated) and the cell started over, dying before it
    passed step 80 again; (80, 80): it died where it resumed; (0, 0): stopped before its first step, twice. The
    attempts that did not pass where they started count."""
    peer = Ledger(None, tmp_path, max_attempts=3)
    study = peer.study("run:back")
    peer.enqueue(study, {CELL: AXES})
    for step in steps:
        die_holding_a_claim(tmp_path, "run:back", checkpoint_step=step)
        reclaim(peer, study)
    [waiting] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting.user_attrs.get(PREEMPTED, [])) == preempted and len(waiting.user_attrs[ATTEMPTS]) == counted


def test_an_attempt_that_moved_the_checkpoint_on_starts_the_row_again(tmp_path):
    """Lost attempts in a row: stuck, progressing, stuck, stuck with a limit of 3 is a row of 2, not failed for good."""
    peer = Ledger(None, tmp_path, max_attempts=3)
    study = peer.study("run:row")
    peer.enqueue(study, {CELL: AXES})
    for step in (None, 20, None, None):
        die_holding_a_claim(tmp_path, "run:row", checkpoint_step=step)
        reclaim(peer, study)
    assert failed_for_good(study) == []
    [waiting] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting.user_attrs[ATTEMPTS]) == 2 and len(waiting.user_attrs[PREEMPTED]) == 1


def test_a_given_back_attempt_is_where_the_next_one_starts(tmp_path):
    """Ctrl-C or SIGTERM gave the cell back at step 70 (its checkpoint at the stop): the next attempt, killed before
    it wrote a newer one, made no progress, whatever the attempt before the stop had reached."""
    peer = Ledger(None, tmp_path, max_attempts=1)
    study = peer.study("run:stop")
    peer.enqueue(study, {CELL: AXES})
    worker = Ledger(None, tmp_path)
    claim = worker.claim(worker.study("run:stop"))
    claim.set_attr("checkpoint", {"epoch": 7, "batch": 0, "step": 70})
    claim.release()
    worker.close()
    die_holding_a_claim(tmp_path, "run:stop")
    reclaim(peer, study)
    assert [r.user_attrs["cell_id"] for r in failed_for_good(study)] == [CELL]
