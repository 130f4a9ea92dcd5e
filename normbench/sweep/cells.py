"""What run and tune share about a suite's cells: the recipe guard on their studies (another recipe's cells would mix
recipes in one leaderboard, so are refused before any write) and the MLflow run a claimed cell starts."""

from __future__ import annotations

from typing import Any

import optuna

from normbench.contracts.suite import Suite
from normbench.errors import SuiteError
from normbench.store.claim import Claim
from normbench.store.ledger import Ledger
from normbench.tracking.run_record import TrialRun, trial_run


def open_study_of_recipe(ledger: Ledger, suite: Suite, name: str, **study_kwargs: Any) -> optuna.Study:
    """Study `name`, stamped with the suite's recipe; refuses (SuiteError) when it was trained with another one."""
    ledger.serve(suite.name, suite.recipe_hash())  # and every later claim checks its study is still this suite's
    study = ledger.study(name, **study_kwargs)  # an existing study loads without a write: a refused run leaves the
    check_recipe(ledger, suite, study)           # ledger byte for byte as it was
    if "recipe" not in study.user_attrs:
        ledger.call(study.set_user_attr, "recipe", suite.recipe_hash())
    return study


def check_recipe(ledger: Ledger, suite: Suite, study: optuna.Study) -> None:
    """Refuse to add cells of this suite to `study` if its dataset/model/train sections changed since it trained."""
    recipe = study.user_attrs.get("recipe")
    if recipe is not None and recipe != suite.recipe_hash():
        raise SuiteError(f"{suite.path}: its dataset/model/train sections changed since the cells in this ledger "
                         f"({ledger.url}) were trained; resuming would mix recipes. Use another --out (or "
                         "--storage), or delete the old results. Changing only the matrix is fine.")


def cell_run(suite: Suite, claim: Claim) -> TrialRun:
    """The claimed cell's MLflow run as it starts: tracking/run_record.py `trial_run` of the trial as the ledger holds
    it now (read after the job wrote what names it: a search trial's sampled values and label), the description sync
    writes too, so a store rebuilt from the ledger equals the live one."""
    return trial_run(claim.study.study_name, claim.frozen(), suite)
