"""Trials written by an older normbench are read in the current format."""

from __future__ import annotations

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from normbench.store.ledger import Ledger
from normbench.store.migrations import trial_axes, trial_cell_id


def _trial(user_attrs, params=None):
    params = params or {}
    dists = {k: (FloatDistribution(0.0, 1.0) if isinstance(v, float) else IntDistribution(0, 100))
             for k, v in params.items()}
    return optuna.trial.create_trial(state=TrialState.COMPLETE, value=1.0, params=params, distributions=dists,
                                     user_attrs=user_attrs)


def test_a_version_1_id_is_recomputed_from_the_axes_sorted():
    old = _trial({"cell_id": "lr=0.001,depth=2", "axes": {"lr": 0.001, "depth": 2}})
    assert trial_cell_id(old) == "depth=2,lr=0.001"


def test_axes_kept_only_as_params_are_read_from_the_params():
    old = _trial({"cell_id": "depth=2,lr=0.5"}, params={"depth": 2, "lr": 0.5})
    assert trial_axes(old) == {"depth": 2, "lr": 0.5}
    assert trial_cell_id(old) == "depth=2,lr=0.5"


def test_a_tuning_slot_is_no_cell():
    assert trial_cell_id(_trial({})) is None


def test_enqueue_does_not_queue_again_a_cell_an_old_ledger_holds_under_an_unsorted_id(tmp_path):
    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:old")
    study.add_trial(_trial({"cell_id": "lr=0.001,depth=2", "axes": {"lr": 0.001, "depth": 2}}))
    assert ledger.enqueue(study, {"depth=2,lr=0.001": {"depth": 2, "lr": 0.001}}) == 0
    assert ledger.enqueue(study, {"depth=4,lr=0.001": {"depth": 4, "lr": 0.001}}) == 1
