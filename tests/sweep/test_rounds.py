"""normbench.sweep.rounds: a bracketing round queued under an older rule gives back the untrained cells today's rule
does not ask for, on a journal ledger of hand-made finished cells (no training)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import parse_suite
from normbench.store.ledger import Ledger, withdrawn
from normbench.store.migrations import trial_cell_id
from normbench.sweep.dry_run import dry_run_report
from normbench.sweep.rounds import sealed, selection_so_far, unasked_cells, withdraw_unasked
from normbench.sweep.run import cells_left, open_run, open_run_study, queue_next_stage

MATRIX = {"depth": [2], "layer": ["layernorm"], "lr": [1.0e-3, 3.0e-3], "seed": [0, 1]}
ASKED = 3.333e-4  # the row's best is its lowest lr (1e-3): today's rule steps one grid step below it
OLD_RULE = 9e-3  # what an older rule had asked for as well


@pytest.fixture
def suite():
    raw = {"name": "r", "dataset": {"name": "digits"}, "matrix": MATRIX, "bracket": True}
    return parse_suite(raw, Path("r.yaml"))


def axes(lr: float, seed: int) -> dict:
    return {"depth": 2, "layer": "layernorm", "lr": lr, "seed": seed}


def add(study: optuna.Study, suite, lr: float, seed: int, val: float | None = None) -> None:
    """A cell of `study`: finished at `val`, or WAITING (val None)."""
    a = axes(lr, seed)
    attrs = {"cell_id": suite.cell(a).cell_id, "axes": a}
    if val is None:
        study.add_trial(optuna.create_trial(state=TrialState.WAITING, user_attrs=attrs))
    else:
        result = {"status": "ok", "val_top1": val, "test_top1": val}
        study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=val, user_attrs={**attrs,
                                                                                               "result": result}))


@pytest.fixture
def ledger_with_an_old_round(suite, tmp_path):
    """The matrix finished (best lr 1e-3, the lowest), and round 1 as an older rule queued it: today's step below
    (both seeds waiting), a step above (both waiting), and a cell it already trained."""
    ledger, run = selection_done(tmp_path, suite, ((80, 82), (70, 72)))
    round_1 = ledger.study(StudyNames(suite.name).bracket(1))
    given_back = axes(OLD_RULE, 0)  # an attempt SIGTERM gave back (FAIL) before its copy waits again
    round_1.add_trial(optuna.create_trial(state=TrialState.FAIL, user_attrs={
        "cell_id": suite.cell(given_back).cell_id, "axes": given_back, "worker_pid": 1}))
    for seed in (0, 1):
        add(round_1, suite, ASKED, seed)
        add(round_1, suite, OLD_RULE, seed)
    add(round_1, suite, 1e-4, 0, val=60.0)
    return ledger, run, round_1


def selection_done(tmp_path, suite, vals=((80, 82), (78, 79))):
    """A ledger whose matrix finished, lr 1e-3 and 3e-3 scoring `vals` on seeds 0 and 1; and its run study."""
    ledger = Ledger(None, tmp_path)
    run = open_run_study(ledger, suite)
    for lr, pair in zip((1e-3, 3e-3), vals, strict=True):
        for seed, val in enumerate(pair):
            add(run, suite, lr, seed, val)
    return ledger, run


def states(study) -> dict:
    return {(t.user_attrs["axes"]["lr"], t.user_attrs["axes"]["seed"]): t.state for t in study.get_trials()}


def test_an_old_rounds_unasked_waiting_cells_are_withdrawn_and_the_rest_stay(suite, ledger_with_an_old_round):
    ledger, run, round_1 = ledger_with_an_old_round
    gone = withdraw_unasked(suite, ledger, run)
    assert gone == [axes(OLD_RULE, 0), axes(OLD_RULE, 1)]
    assert states(round_1) == {(ASKED, 0): TrialState.WAITING, (ASKED, 1): TrialState.WAITING,
                               (OLD_RULE, 0): TrialState.FAIL, (OLD_RULE, 1): TrialState.FAIL,
                               (1e-4, 0): TrialState.COMPLETE}  # trained cells stay: they are results
    assert "round 1" in round_1.get_trials()[2].user_attrs["withdrawn"]
    assert withdraw_unasked(suite, ledger, run) == []  # once


def test_a_withdrawn_cell_does_not_count_as_queued_so_a_later_round_may_ask_for_it(suite, ledger_with_an_old_round):
    ledger, run, round_1 = ledger_with_an_old_round
    withdraw_unasked(suite, ledger, run)
    assert selection_so_far(suite, ledger, [run, round_1]) is None  # today's cells wait: no next round yet
    for t in round_1.get_trials(states=(TrialState.WAITING,)):  # they train
        ledger.storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING)
        ledger.storage.set_trial_user_attr(t._trial_id, "result", {"status": "ok", "val_top1": 50.0, "test_top1": 0})
        ledger.storage.set_trial_state_values(t._trial_id, state=TrialState.COMPLETE, values=[50.0])
    finished, present = selection_so_far(suite, ledger, [run, round_1])
    assert len(finished) == 7
    withdrawn_ids = {trial_cell_id(t) for t in round_1.get_trials() if withdrawn(t)}
    assert len(withdrawn_ids) == 2 and not withdrawn_ids & present  # seed 0's given-back attempt included
    assert suite.cell(axes(ASKED, 0)).cell_id in present


def test_a_round_is_not_judged_while_the_studies_before_it_are_unfinished(suite, ledger_with_an_old_round):
    """Once `--retry-failed` (or an edit) puts a cell back before the round, its reading is no longer the one that
    queued the round: nothing is withdrawn."""
    ledger, run, _ = ledger_with_an_old_round
    add(run, suite, 3e-3, 0)  # a matrix cell queued again
    assert unasked_cells(suite, ledger, run) == []


def test_without_bracketing_nothing_is_withdrawn(suite, ledger_with_an_old_round, tmp_path):
    ledger, run, _ = ledger_with_an_old_round
    off = parse_suite({"name": "r", "dataset": {"name": "digits"}, "matrix": MATRIX}, Path("r.yaml"))
    assert unasked_cells(off, ledger, run) == []


def test_dry_run_names_the_cells_the_next_run_withdraws_and_leaves_them_out_of_the_time_left(
        suite, ledger_with_an_old_round, tmp_path):
    dry = dry_run_report(suite, tmp_path, None)
    lines = [line for line in dry.splitlines() if "lr=0.009," in line]
    assert len(lines) == 2 and all("withdrawn at the next run (bracket round 1" in line for line in lines)
    assert "9 cells, 5 finished, 2 withdrawn (queued under an older bracketing rule or selection" in dry
    ledger, run, _ = ledger_with_an_old_round
    withdraw_unasked(suite, ledger, run)
    assert sum("withdrawn (bracket round 1: queued under an older rule)" in line
               for line in dry_run_report(suite, tmp_path, None).splitlines()) == 2


def test_a_run_withdraws_them_before_counting_its_cells_and_says_which(suite, ledger_with_an_old_round, tmp_path,
                                                                       capsys):
    ledger, _, round_1 = ledger_with_an_old_round
    _, _, progress = open_run(suite, ledger, tmp_path)
    assert progress.total == 7  # the matrix's 4, today's 2 and the one trained: not the 2 withdrawn
    assert sum(withdrawn(t) for t in round_1.get_trials()) == 2
    assert ("withdrew 2 untrained cell(s) queued under an older bracketing rule or for a selection that no longer "
            "stands, which today's does not ask for (`run --dry-run` lists them): depth=2, layer=layernorm, lr=0.009 "
            "(seeds 0, 1)") in capsys.readouterr().err


def test_a_round_a_peer_created_but_has_not_filled_yet_is_filled_not_read_as_finished(suite, tmp_path):
    """The race two local workers once lost: one created round 1 and was still queueing its cells when the other read
    the empty study as a finished round and queued the same cells as round 2; both copies trained."""
    ledger, run = selection_done(tmp_path, suite, ((80, 82), (70, 72)))
    names = StudyNames(suite.name)
    round_1 = ledger.study(names.bracket(1))  # created, not filled: its queuer is slow, or died here
    queue_next_stage(suite, run, ledger)
    assert names.bracket(2) not in ledger.study_names()
    assert sorted(states(round_1)) == [(ASKED, 0), (ASKED, 1)] and sealed(ledger, round_1)
    queue_next_stage(suite, run, ledger)  # its cells wait: nothing more
    assert len(round_1.get_trials()) == 2 and names.bracket(2) not in ledger.study_names()


def reporting_suite(seeds: list[int]):
    """Bracketing off (its rounds are not what is tested here), 2 report seeds, the 2x check on both."""
    return parse_suite({"name": "r", "dataset": {"name": "digits"}, "matrix": {**MATRIX, "seed": seeds},
                        "report_seeds": [100, 101], "budget_check": True}, Path("r.yaml"))


def stage_states(ledger) -> dict:
    names = StudyNames("r")
    return {(name, t.user_attrs["axes"]["lr"], t.user_attrs["axes"]["seed"], t.state)
            for name in (names.report, names.budget) for t in ledger.study(name).get_trials()}


def test_the_report_stage_of_a_selection_that_reopened_is_withdrawn_and_queued_again_at_the_lr_chosen_after(tmp_path):
    """The modern suite's resume: selection over on 2 seeds (lr 1e-3), its report stage queued, then 2 more selection
    seeds reopen it. The stage's waiting cells would train an lr that may move: they wait for selection, and once it
    is over the stage queues the lr it chose."""
    two = reporting_suite([0, 1])
    ledger, run = selection_done(tmp_path, two)
    queue_next_stage(two, run, ledger)
    assert len(stage_states(ledger)) == 4 and all(lr == 1e-3 for _, lr, _, _ in stage_states(ledger))
    assert withdraw_unasked(two, ledger, run) == []  # the selection it was queued for stands: nothing goes

    four = reporting_suite([0, 1, 2, 3])
    for lr in (1e-3, 3e-3):
        for seed in (2, 3):
            add(run, four, lr, seed)  # queued, not trained: selection is open again
    dry = dry_run_report(four, tmp_path, None).splitlines()
    assert sum("withdrawn at the next run (report seed" in line for line in dry) == 2
    assert sum("withdrawn at the next run (convergence check" in line for line in dry) == 2
    gone = withdraw_unasked(four, ledger, run)
    assert len(gone) == 4 and {a["lr"] for a in gone} == {1e-3}
    assert {state for *_, state in stage_states(ledger)} == {TrialState.FAIL}
    report_words = [t.user_attrs["withdrawn"] for t in ledger.study(StudyNames("r").report).get_trials()]
    assert all("selection that no longer stands" in words for words in report_words)

    for t in run.get_trials(states=(TrialState.WAITING,)):  # seeds 2 and 3 train: 3e-3 is chosen now
        val = 60.0 if t.user_attrs["axes"]["lr"] == 1e-3 else 90.0
        ledger.storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING)
        ledger.storage.set_trial_user_attr(t._trial_id, "result", {"status": "ok", "val_top1": val, "test_top1": val})
        ledger.storage.set_trial_state_values(t._trial_id, state=TrialState.COMPLETE, values=[val])
    queue_next_stage(four, run, ledger)
    waiting = {(name, lr, seed) for name, lr, seed, state in stage_states(ledger) if state == TrialState.WAITING}
    assert {lr for _, lr, _ in waiting} == {3e-3} and len(waiting) == 4
    assert withdraw_unasked(four, ledger, run) == []


def test_a_report_cell_that_raised_waits_for_the_next_run_which_queues_it_again(tmp_path):
    """Queued again at once, a cell that always raises kept both workers busy for ever and the run never ended."""
    two = reporting_suite([0, 1])
    ledger, run = selection_done(tmp_path, two)
    queue_next_stage(two, run, ledger)
    report = ledger.study(StudyNames("r").report)
    claim = ledger.claim(report)
    claim.fail("RuntimeError: boom")
    failed = trial_cell_id(claim.frozen())
    queue_next_stage(two, run, ledger)  # what a worker whose queue ran dry does
    queue_next_stage(two, run, ledger)
    assert len(report.get_trials()) == 2  # the failed record and the other seed's cell: no copy
    assert failed in cells_left(two, ledger)  # and the dry run counts it as left, saying why
    [line] = [line for line in dry_run_report(two, tmp_path, None).splitlines() if line.startswith(failed + " ")]
    assert "to run (report seed; failed here, queued again by the next run: RuntimeError: boom)" in line
    _, _, progress = open_run(two, ledger, tmp_path)  # the next run
    assert [trial_cell_id(t) for t in report.get_trials(states=(TrialState.WAITING,))].count(failed) == 1
    assert progress.total == 4 + 2 + 2 and progress.done == 4


def test_a_bracketing_rounds_cell_that_raised_is_queued_again_by_the_next_run(suite, tmp_path):
    """The round after it never asks for it again (it counts as queued), so without this its lr was judged on the
    seeds that did not raise."""
    ledger, run = selection_done(tmp_path, suite, ((80, 82), (70, 72)))
    queue_next_stage(suite, run, ledger)
    round_1 = ledger.study(StudyNames(suite.name).bracket(1))
    claim = ledger.claim(round_1)
    claim.fail("RuntimeError: boom")
    failed = trial_cell_id(claim.frozen())
    open_run(suite, ledger, tmp_path)
    assert [trial_cell_id(t) for t in round_1.get_trials(states=(TrialState.WAITING,))].count(failed) == 1
    assert selection_so_far(suite, ledger, [run, round_1]) is None  # no round 2 read before it trains
