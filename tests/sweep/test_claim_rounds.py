"""normbench.sweep.claim_rounds and the runner's claim stage: a claim still open after the report seeds asks for
the next round of report seeds for both of its rows, queued into `claims:<suite>`, until it decides or reaches the
cap. On a journal ledger of hand-made finished cells (no training)."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.names import StudyNames
from normbench.contracts.suite import parse_suite
from normbench.report.frames import cells_frame
from normbench.store.ledger import Ledger
from normbench.sweep.run import open_run_study, queue_next_stage

OPEN_DIFFS = [3.0, 9.0, 1.0, 7.0]  # mean 5, sd 3.65: undecided at 4 seeds, decidable at 16 (tests/report)


def make_suite(max_seeds: int = 16):
    raw = {"name": "c", "dataset": {"name": "digits"},
           "matrix": {"depth": [2], "layer": ["layernorm", "rmsnorm"], "lr": [1.0e-3], "seed": [0, 1]},
           "report_seeds": [100, 101, 102, 103], "sequential": {"max_seeds": max_seeds},
           "claims": [{"layer": "rmsnorm", "beats": "layernorm", "depth": 2}]}
    return parse_suite(raw, Path("c.yaml"))


def add(study: optuna.Study, suite, layer: str, seed: int, test: float) -> None:
    axes = {"depth": 2, "layer": layer, "lr": 1.0e-3, "seed": seed}
    result = {"status": "ok", "val_top1": 70.0, "test_top1": test}
    study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=70.0, user_attrs={
        "cell_id": suite.cell(axes).cell_id, "axes": axes, "result": result}))


def reported(tmp_path, suite, diffs: list[float]):
    """A ledger whose matrix and report seeds (100, 101, ...) finished: rmsnorm minus layernorm is `diffs`."""
    ledger = Ledger(None, tmp_path)
    names = StudyNames(suite.name)
    run = open_run_study(ledger, suite)
    for layer in ("layernorm", "rmsnorm"):
        for seed in (0, 1):
            add(run, suite, layer, seed, 70.0)
    report = ledger.study(names.report)
    for i, d in enumerate(diffs[:4]):
        add(report, suite, "layernorm", 100 + i, 70.0)
        add(report, suite, "rmsnorm", 100 + i, 70.0 + d)
    return ledger, run


def queued_seeds(ledger, suite) -> dict[str, list[int]]:
    names = StudyNames(suite.name)
    if names.claims not in ledger.study_names():
        return {}
    seeds: dict[str, list[int]] = {}
    for t in ledger.study(names.claims).get_trials(deepcopy=False):
        seeds.setdefault(t.user_attrs["axes"]["layer"], []).append(t.user_attrs["axes"]["seed"])
    return {k: sorted(v) for k, v in seeds.items()}


def test_an_open_claim_queues_the_next_round_for_both_rows_then_stops_once_decided(tmp_path):
    suite = make_suite()
    ledger, run = reported(tmp_path, suite, OPEN_DIFFS)
    queue_next_stage(suite, run, ledger)
    assert queued_seeds(ledger, suite) == {"layernorm": [104, 105, 106, 107], "rmsnorm": [104, 105, 106, 107]}
    queue_next_stage(suite, run, ledger)  # a peer computing the same stage queues nothing twice
    assert sum(map(len, queued_seeds(ledger, suite).values())) == 8

    claims = ledger.study(StudyNames(suite.name).claims)  # the round trains: a strong second round decides it
    for t in claims.get_trials(deepcopy=False):
        test = 76.0 if t.user_attrs["axes"]["layer"] == "rmsnorm" else 70.0
        ledger.storage.set_trial_state_values(t._trial_id, TrialState.RUNNING)
        ledger.storage.set_trial_user_attr(t._trial_id, "result", {"status": "ok", "val_top1": 70.0,
                                                                    "test_top1": test})
        ledger.storage.set_trial_state_values(t._trial_id, TrialState.COMPLETE, [70.0])
    queue_next_stage(suite, run, ledger)
    assert sum(map(len, queued_seeds(ledger, suite).values())) == 8  # decided: no third round

    cells = cells_frame(ledger, StudyNames(suite.name), scope=MatrixScope(suite))
    assert sorted(cells[cells["role"] == "report"]["seed"].unique()) == list(range(100, 108))  # they score


def test_no_round_while_a_report_seed_is_still_training_nor_for_a_decided_or_hopeless_claim(tmp_path):
    suite = make_suite()
    ledger, run = reported(tmp_path / "a", suite, OPEN_DIFFS)
    report = ledger.study(StudyNames(suite.name).report)
    report.enqueue_trial({}, user_attrs={"cell_id": "x", "axes": {"depth": 2, "layer": "rmsnorm", "lr": 1.0e-3,
                                                                  "seed": 103}})
    queue_next_stage(suite, run, ledger)
    assert queued_seeds(ledger, suite) == {}  # the report stage is not over: the claims wait for it

    for name, diffs in (("decided", [10.0, 11.0, 9.5, 10.5]), ("hopeless", [20.0, -18.0, 5.0, -6.0])):
        ledger, run = reported(tmp_path / name, suite, diffs)
        queue_next_stage(suite, run, ledger)
        assert queued_seeds(ledger, suite) == {}, name


def test_rounds_off_when_the_cap_is_the_report_seeds(tmp_path):
    suite = make_suite(max_seeds=4)
    ledger, run = reported(tmp_path, suite, OPEN_DIFFS)
    queue_next_stage(suite, run, ledger)
    assert queued_seeds(ledger, suite) == {}


def test_a_rounds_seeds_are_those_its_row_lacks_at_its_chosen_lr(tmp_path):
    """Seeds 104-107 trained at an lr the row no longer chooses (its selection moved since) are not had: the round
    trains them at the chosen lr."""
    from normbench.sweep.claim_rounds import claim_round_axes

    suite = make_suite()
    ledger, _ = reported(tmp_path, suite, OPEN_DIFFS)
    claims = ledger.study(StudyNames(suite.name).claims)
    for seed in range(104, 108):  # an earlier round at lr 3e-3
        axes = {"depth": 2, "layer": "rmsnorm", "lr": 3.0e-3, "seed": seed}
        claims.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=70.0, user_attrs={
            "cell_id": suite.cell(axes).cell_id, "axes": axes,
            "result": {"status": "ok", "val_top1": 70.0, "test_top1": 70.0}}))
    axes = claim_round_axes(suite, cells_frame(ledger, StudyNames(suite.name)))
    assert sorted((a["layer"], a["lr"], a["seed"]) for a in axes if a["layer"] == "rmsnorm") == \
        [("rmsnorm", 1.0e-3, s) for s in range(104, 108)]
