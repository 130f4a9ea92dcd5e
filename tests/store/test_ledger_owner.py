"""One suite's workers touch only that suite: every claim checks the study still carries the suite and recipe the
worker serves (a study replaced mid-run by another team's, or a mistyped --storage, is refused by name), and a claim
its worker never signed (killed between claim and start, or an answer the network lost) is queued again without
counting as an attempt that killed its worker."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from normbench.errors import NormbenchError
from normbench.store.ledger import ATTEMPTS, SUITE, Ledger

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


def test_a_claim_never_signed_is_queued_again_without_counting_an_attempt(tmp_path, monkeypatch):
    ledger, study = queued(tmp_path)
    [waiting] = study.get_trials(deepcopy=False)
    assert ledger.storage.set_trial_state_values(waiting._trial_id, state=TrialState.RUNNING)  # claimed, unsigned
    monkeypatch.setattr("normbench.store.ledger._never_owned", lambda trial, grace_seconds=60.0: True)
    assert [t.number for t in ledger.reclaim(study)] == [waiting.number]
    [again] = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert again.user_attrs["cell_id"] == CELL and ATTEMPTS not in again.user_attrs
