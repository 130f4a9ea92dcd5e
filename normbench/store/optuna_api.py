"""What normbench needs of Optuna beyond its public API, pinned by tests/store/test_optuna_api.py on the installed
Optuna (a new minor that moves any of it fails that test, not a run): the journal's op codes (`JOURNAL_OPS`, private
in Optuna but the file format), and one RDBStorage step. Optuna retries a trial's creation after a commit error,
creating it twice if only the answer was lost, so each try's insert (`INSERT_STEP`) first looks the row up by
`TRIAL_KEY` in Optuna's alembic-migrated tables `trials` and `trial_system_attributes`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import optuna

# Optuna features normbench uses knowingly, stable for years: their "experimental" warnings tell a user nothing
warnings.filterwarnings("ignore", r"Argument ``heartbeat_interval`` is an experimental feature",
                        optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", r"optuna\.storages\..*fail_stale_trials is experimental",
                        optuna.exceptions.ExperimentalWarning)


class TrialIds:
    """Storage trial ids of a study's trials, by public calls, each asked once."""

    def __init__(self, storage: optuna.storages.BaseStorage) -> None:
        self.storage = storage
        self._studies: dict[str, int] = {}
        self._trials: dict[tuple[str, int], int] = {}

    def of(self, study: optuna.Study, number: int) -> int:
        key = (study.study_name, number)
        if key not in self._trials:
            if study.study_name not in self._studies:
                self._studies[study.study_name] = self.storage.get_study_id_from_name(study.study_name)
            self._trials[key] = self.storage.get_trial_id_from_study_id_trial_number(
                self._studies[study.study_name], number)
        return self._trials[key]


# The journal format (Optuna's JournalOperation): op code -> (name, the fields its replay reads without a default)
_TRIAL, _STUDY = ("worker_id", "trial_id"), ("worker_id", "study_id")
JOURNAL_OPS: dict[int, tuple[str, tuple[str, ...]]] = {
    0: ("CREATE_STUDY", ("worker_id", "study_name", "directions")),
    1: ("DELETE_STUDY", _STUDY),
    2: ("SET_STUDY_USER_ATTR", (*_STUDY, "user_attr")),
    3: ("SET_STUDY_SYSTEM_ATTR", (*_STUDY, "system_attr")),
    4: ("CREATE_TRIAL", (*_STUDY, "datetime_start")),
    5: ("SET_TRIAL_PARAM", (*_TRIAL, "param_name", "param_value_internal", "distribution")),
    6: ("SET_TRIAL_STATE_VALUES", (*_TRIAL, "state", "values")),
    7: ("SET_TRIAL_INTERMEDIATE_VALUE", (*_TRIAL, "step", "intermediate_value")),
    8: ("SET_TRIAL_USER_ATTR", (*_TRIAL, "user_attr")),
    9: ("SET_TRIAL_SYSTEM_ATTR", (*_TRIAL, "system_attr")),
    10: ("DISCARD_TRIALS", ()),  # written by Rustuna; Optuna's replay skips it
}
SET_STATE = 6
# What SET_TRIAL_STATE_VALUES also reads, by state set: RUNNING (0) a start, COMPLETE/PRUNED/FAIL (1-3) a completion
STATE_TIMES = {"datetime_start": (0,), "datetime_complete": (1, 2, 3)}

TRIAL_KEY = "normbench_key"  # Optuna system attr of each trial the ledger queues: what its creation is found by
INSERT_STEP = "_get_prepared_new_trial"  # RDBStorage: (study_id, template_trial, session) -> the inserted TrialModel


def find_trial_by_key(storage: Any) -> None:
    """Make each try of `storage`'s trial creation first return the study's trial with the template's TRIAL_KEY."""
    insert: Callable[..., Any] = getattr(storage, INSERT_STEP)
    from sqlalchemy import text  # noqa: PLC0415 (only RDB ledgers get here)

    found_by_key = text(
        "SELECT t.trial_id, t.number, t.datetime_start, t.state FROM trials t JOIN trial_system_attributes a "
        "ON a.trial_id = t.trial_id WHERE t.study_id = :study AND a.key = :key AND a.value_json = :value LIMIT 1")

    def find_or_insert(study_id: int, template_trial: Any, session: Any) -> Any:
        key = template_trial.system_attrs.get(TRIAL_KEY) if template_trial is not None else None
        if key is not None:
            row = session.execute(found_by_key, {"study": study_id, "key": TRIAL_KEY, "value": json.dumps(key)}).first()
            if row is not None:  # what Optuna reads of the inserted row: trial_id, number, datetime_start
                return row
        return insert(study_id, template_trial, session)

    setattr(storage, INSERT_STEP, find_or_insert)
