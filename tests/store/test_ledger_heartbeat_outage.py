"""After an outage of the ledger database long enough to hide a live peer's heartbeats for a grace, a process holds off
judging peers stale for one grace period: their beats were lost with the server too, so a silence then says nothing
about their workers. A shorter blip (a dropped session) holds nothing off. Heartbeats that fail tell it, too."""

from __future__ import annotations

import time

import optuna
from optuna.trial import TrialState

from normbench.store.attempts import reclaim
from normbench.store.ledger import Ledger
from normbench.store.trial_params import add_waiting_trial, axis_distributions

AXES = {"depth": 2, "layer": "layernorm", "lr": 1e-3, "seed": 0}


def _ledger_with_a_claim(tmp_path, grace=2):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, heartbeat_interval=1, grace_period=grace)
    study = ledger.study("run:beats")
    for seed in (0, 1):
        axes = {**AXES, "seed": seed}
        add_waiting_trial(study, axes, axis_distributions([axes]), user_attrs={"cell_id": f"c{seed}", "axes": axes})
    return ledger, study, ledger.claim(study)


def _beat_through_an_outage(ledger, trial, monkeypatch, failures=2):
    """Run the heartbeat while its first `failures` beats hit a server that is away, until a beat lands again.
    Returns each call's (start, end) monotonic times, the last one's end once it has landed."""
    real = ledger.storage.record_heartbeat
    calls = []

    def flaky(trial_id):
        calls.append([time.monotonic(), None])
        try:
            if len(calls) <= failures:
                raise optuna.exceptions.StorageInternalError("could not connect to server: Connection refused")
            return real(trial_id)
        finally:
            calls[-1][1] = time.monotonic()

    monkeypatch.setattr(ledger.storage, "record_heartbeat", flaky)
    with trial.heartbeat():
        deadline = time.monotonic() + 10
        while len(calls) <= failures and time.monotonic() < deadline:
            time.sleep(0.05)
    # leaving the block stops the heartbeat and waits for its thread: the beat under way has landed
    return calls


def test_a_beat_that_lands_after_failed_ones_marks_the_server_back(tmp_path, monkeypatch):
    ledger, _, trial = _ledger_with_a_claim(tmp_path)
    assert not ledger.outage.back_within(60)
    calls = _beat_through_an_outage(ledger, trial, monkeypatch)
    left = time.monotonic()
    assert len(calls) > 2
    assert ledger.outage.back_within(60)
    # the outage as measured: from the first failed beat (noted after it failed, before the next one started) to
    # the beat that landed (noted after it landed, before the heartbeat stopped)
    first_end, second_start, landed = calls[0][1], calls[1][0], calls[2][1]
    assert landed - second_start <= ledger.outage.down_for <= left - first_end


def test_beats_that_never_failed_leave_the_server_as_it_was(tmp_path):
    ledger, _, trial = _ledger_with_a_claim(tmp_path)
    with trial.heartbeat():
        time.sleep(1.5)
    assert not ledger.outage.back_within(60)


def test_a_peer_silent_through_the_outage_is_not_judged_stale_until_a_grace_has_passed(tmp_path, monkeypatch):
    ledger, study, mine = _ledger_with_a_claim(tmp_path, grace=2)
    peer = ledger.claim(study)  # the other cell: its worker's beats stop (lost with the server, in the story)
    # the peer's last beat is now older than the grace, as Optuna sees it: its clock is SQLite's CURRENT_TIMESTAMP,
    # whole seconds, so a beat 2.2 s old can read as 2 s, not over the grace of 2
    time.sleep(3.2)
    _beat_through_an_outage(ledger, mine, monkeypatch)
    assert reclaim(ledger, study) == []  # the server came back less than one grace ago: no verdict
    assert ledger.storage.get_trial(peer.id).state == TrialState.RUNNING
    time.sleep(2.2)
    assert peer.number in [t.number for t in reclaim(ledger, study)]  # a grace later, silence means lost


def test_a_blip_too_short_to_hide_a_beat_holds_off_no_verdict(tmp_path):
    ledger, study, _ = _ledger_with_a_claim(tmp_path, grace=4)
    peer = ledger.claim(study)
    tries = []

    def dropped_once():  # one call on a session the server dropped, then a fresh one answers
        tries.append(1)
        if len(tries) == 1:
            raise optuna.exceptions.StorageInternalError("server closed the connection unexpectedly")
        return "ok"

    time.sleep(5.5)  # both claims' beats are older than the grace, in Optuna's whole seconds too (see above)
    assert ledger.outage.call(dropped_once) == "ok"
    assert ledger.outage.back_within(4) and ledger.outage.down_for < 1.5  # 0.5 s give or take, + 2 x 1 s < 4
    assert peer.number in [t.number for t in reclaim(ledger, study)]
