"""The ledger's claim: when two workers queued the same cell at once, exactly one copy of it runs."""

from __future__ import annotations

import json

import pytest
from optuna.trial import TrialState

from normbench.contracts.results import CellResult
from normbench.store.ledger import WITHDRAWN, Ledger, ended_cells, withdrawn
from normbench.store.trial_params import add_waiting_trial, axis_distributions

AXES = {"depth": 2, "layer": "layernorm", "lr": 1e-3, "seed": 0}


@pytest.fixture
def two_copies(tmp_path):
    """A journal ledger holding two WAITING copies of one cell (what two workers enqueueing at once leave)."""
    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:race")
    for _ in range(2):
        add_waiting_trial(study, AXES, axis_distributions([AXES]), user_attrs={"cell_id": "c", "axes": AXES})
    return ledger, study


def claim_both(ledger, study):
    """Both workers have set their copy RUNNING before either checks for the other: the simultaneous claim."""
    for t in study.get_trials(deepcopy=False):
        assert ledger.storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING)
    return study.get_trials(deepcopy=False)


def test_simultaneous_claims_of_two_copies_keep_exactly_one(two_copies):
    ledger, study = two_copies
    low, high = claim_both(ledger, study)
    assert [ledger._duplicate(study, low), ledger._duplicate(study, high)] == [False, True]


def test_a_copy_claimed_while_a_lower_copy_waits_is_dropped(two_copies):
    ledger, study = two_copies
    _, high = study.get_trials(deepcopy=False)
    ledger.storage.set_trial_state_values(high._trial_id, state=TrialState.RUNNING)
    assert ledger._duplicate(study, study.get_trials(deepcopy=False)[1])  # the lower copy will run instead


def test_claim_runs_one_copy_and_fails_the_other(two_copies):
    ledger, study = two_copies
    first = ledger.claim(study)
    assert first is not None and first.number == 0
    assert ledger.claim(study) is None  # the second copy is dropped, not handed out
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.RUNNING, TrialState.FAIL]


def test_a_finished_cell_drops_any_later_copy(two_copies):
    ledger, study = two_copies
    first = ledger.claim(study)
    study.tell(first.trial, 50.0)
    later = study.get_trials(deepcopy=False)[1]
    ledger.storage.set_trial_state_values(later._trial_id, state=TrialState.RUNNING)
    assert ledger._duplicate(study, study.get_trials(deepcopy=False)[1])


def test_looking_up_an_existing_study_writes_nothing(tmp_path):
    ledger = Ledger(None, tmp_path)
    ledger.study("run:quiet")
    size = (tmp_path / "ledger.journal").stat().st_size
    for _ in range(3):  # workers and the progress loop look their studies up every few seconds
        assert ledger.study("run:quiet").study_name == "run:quiet"
    assert (tmp_path / "ledger.journal").stat().st_size == size


@pytest.mark.parametrize("result, value", [
    ({"status": "ok", "best_val_top1": 90.0, "val_top1": 70.0}, 70.0),  # the final epoch, as the report's score
    ({"status": "diverged", "best_val_top1": 40.0, "val_top1": float("nan")}, 0.0),  # blew up: scores 0
])
def test_a_finished_trials_value_is_the_selection_rule_final_epoch_val(tmp_path, result, value):
    ledger = Ledger(None, tmp_path)
    study = ledger.study("tune:sel")
    ledger.enqueue(study, {"c": AXES})
    ledger.claim(study).finish(CellResult.from_summary(result))
    assert study.get_trials(deepcopy=False)[0].value == value  # what `normbench tune` ranks trials by


def test_a_finished_trial_stores_the_summary_and_history_as_before(tmp_path):
    """The stored JSON is what ledgers have always held (results.csv and published ledgers read it): the summary's
    keys in this order, non-finite floats as null, no history in it; the history beside it. It reads back whole.
    Where the cell trained came last, on 2026-11-26, and with which timm and normbench on 2026-12-06: an older reader
    ignores those keys, a newer one defaults them."""
    nan = float("nan")
    history = [{"epoch": 0, "train_loss": 2.0, "val_top1": 40.0, "lr": 1e-3, "grad_norm": 1.5, "images_per_sec": 9.0},
               {"epoch": 1, "train_loss": nan, "val_top1": nan, "lr": 5e-4, "grad_norm": nan, "images_per_sec": 8.0}]
    result = CellResult(status="diverged", best_val_top1=40.0, final_val_top1=40.0, val_top1=nan, test_top1=nan,
                        num_classes=10, best_val_epoch=0, train_size=1077, val_size=360, test_size=360,
                        train_loss=nan, epochs_run=2, images_per_sec=8.5, params=1234, seconds=3.25, history=history,
                        telemetry=[{"step": 0, "block": 0, "rms": 1.0}], device="NVIDIA H200",
                        torch_version="2.11.0+cu130", timm_version="1.0.31", normbench_version="0.9.0",
                        torch_threads="2/1")
    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:json")
    ledger.enqueue(study, {"c": AXES})
    ledger.claim(study).finish(result)
    stored = Ledger(None, tmp_path).study("run:json").get_trials(deepcopy=False)[0]
    assert json.dumps(stored.user_attrs["result"]) == (
        '{"status": "diverged", "best_val_top1": 40.0, "final_val_top1": 40.0, "val_top1": null, "test_top1": null, '
        '"best_val_epoch": 0, "train_size": 1077, "val_size": 360, "test_size": 360, "num_classes": 10, '
        '"train_loss": null, "epochs_run": 2, "images_per_sec": 8.5, "params": 1234, "seconds": 3.25, '
        '"telemetry": [{"step": 0, "block": 0, "rms": 1.0}], "device": "NVIDIA H200", "torch_version": "2.11.0+cu130", '
        '"timm_version": "1.0.31", "normbench_version": "0.9.0", "torch_threads": "2/1", "fused_group": 1}')
    assert json.dumps(stored.user_attrs["history"]) == (
        '[{"epoch": 0, "train_loss": 2.0, "val_top1": 40.0, "lr": 0.001, "grad_norm": 1.5, "images_per_sec": 9.0}, '
        '{"epoch": 1, "train_loss": null, "val_top1": null, "lr": 0.0005, "grad_norm": null, "images_per_sec": 8.0}]')
    assert stored.value == 0.0  # diverged: the selection rule's 0
    back = CellResult.from_summary(stored.user_attrs["result"], stored.user_attrs["history"])
    assert back.summary() == result.summary() and back.history_records() == result.history_records()


def test_withdraw_takes_back_a_waiting_cell_but_never_one_a_worker_claimed(two_copies):
    """Withdrawing races workers' claims: only a cell still WAITING is taken back (FAIL, its reason kept), and such a
    cell is neither failed for good nor kept out of the queue: a later rule may ask for it again."""
    ledger, study = two_copies
    claimed = ledger.claim(study)
    assert claimed is not None
    waiting, running = [t for t in study.get_trials() if t.number != claimed.number], claimed.frozen()
    assert not ledger.withdraw(study, running, "a rule changed")  # the worker's claim came first: it trains
    assert ledger.storage.get_trial(claimed.id).state == TrialState.RUNNING
    assert ledger.withdraw(study, waiting[0], "a rule changed")
    after = study.get_trials()[waiting[0].number]
    assert after.state == TrialState.FAIL and after.user_attrs[WITHDRAWN] == "a rule changed" and withdrawn(after)
    assert not withdrawn(claimed.frozen()) and not ended_cells(study)
    assert not ledger.withdraw(study, waiting[0], "again")  # already ended: nothing to take back


def test_a_withdrawn_cell_can_be_queued_again(tmp_path):
    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:again")
    assert ledger.enqueue(study, {"c": AXES}) == 1
    assert ledger.withdraw(study, study.get_trials()[0], "not asked for")
    assert ledger.enqueue(study, {"c": AXES}) == 1  # a failed-for-good record would keep it out
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.WAITING]


def test_a_ctrl_c_while_the_claim_is_written_gives_the_trial_back(tmp_path, monkeypatch, ctrl_c_raises):
    """Ctrl-C reaches every worker of a run at once, one of them mid-claim: its WAITING -> RUNNING write lands, the
    KeyboardInterrupt is held until the write returns, and the trial goes back to the queue instead of staying
    RUNNING unsigned until the journal's grace (seen once on a loaded CI, tests/faults/test_third_round.py)."""
    import os
    import signal

    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:ctrl-c")
    add_waiting_trial(study, AXES, axis_distributions([AXES]), user_attrs={"cell_id": "c", "axes": AXES})
    write = ledger.storage.set_trial_state_values

    presses = [signal.SIGINT]  # one Ctrl-C, during the claim's write (not again during the give-back's)

    def pressed_mid_write(*args, **kwargs):
        landed = write(*args, **kwargs)
        if presses:
            os.kill(os.getpid(), presses.pop())  # Python runs the handler at the next bytecode: inside this write
        return landed

    monkeypatch.setattr(ledger.storage, "set_trial_state_values", pressed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        ledger.claim(study)
    monkeypatch.undo()
    # given back: its FAIL (uncounted) and a WAITING copy, as any stop before the worker holds a cell
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.FAIL, TrialState.WAITING]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler put back
    assert ledger.claim(study) is not None  # and the next worker takes it
