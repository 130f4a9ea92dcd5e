"""What normbench needs of Optuna beyond its public API, named in this one module and pinned by
tests/store/test_optuna_api.py on the installed Optuna (a new minor that moves any of it fails that test, not a run).

- Trial ids: the storage speaks in trial ids, a Study in trial numbers. `TrialIds` asks the storage's public
  `get_study_id_from_name` / `get_trial_id_from_study_id_trial_number` (and remembers: an id never changes).
- The journal's operation codes and the fields Optuna's replay reads without a default: the on-disk format that
  store/journal.py checks a record against. Optuna keeps them in a private enum; the numbers are the file format.
- RDBStorage internals two features reach into, with no public equivalent:
  * `RDB_RETRIED`: the private storage methods Optuna's own cache (the wrapper every Study puts around an RDBStorage)
    and `fail_stale_trials` call; store/retry.py must wait out an outage in them as in the public ones;
  * `find_trial_by_key`: Optuna retries a trial's creation itself after an error of its commit, and a commit whose
    answer was lost would be created twice; store/idempotent.py hooks the one step of each try that inserts the trial
    so a try finds the row an earlier one committed (Optuna exposes no hook for it).
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
# What SET_TRIAL_STATE_VALUES also reads, by the state it sets (TrialState values): RUNNING (0) its start, a
# finished state (COMPLETE 1, PRUNED 2, FAIL 3) its completion
STATE_TIMES = {"datetime_start": (0,), "datetime_complete": (1, 2, 3)}

RDB_RETRIED = ("_get_trials", "_get_stale_trial_ids", "_get_best_trial_id", "_create_new_trial", "_set_trial_param")
INSERT_STEP = "_get_prepared_new_trial"  # RDBStorage: (study_id, template_trial, session) -> the inserted TrialModel


def find_trial_by_key(storage: Any, key_name: str) -> None:
    """Make each try of `storage`'s trial creation first look for a trial of the study whose system attr
    `key_name` equals the template's (a row an earlier try committed before its answer was lost) and return it."""
    insert: Callable[..., Any] = getattr(storage, INSERT_STEP)

    def find_or_insert(study_id: int, template_trial: Any, session: Any) -> Any:
        key = template_trial.system_attrs.get(key_name) if template_trial is not None else None
        if key is not None:
            from optuna.storages._rdb import models  # noqa: PLC0415 (the ORM, only for this lookup)

            found = (session.query(models.TrialModel).join(models.TrialSystemAttributeModel)
                     .filter(models.TrialModel.study_id == study_id,
                             models.TrialSystemAttributeModel.key == key_name,
                             models.TrialSystemAttributeModel.value_json == json.dumps(key)).first())
            if found is not None:
                return found
        return insert(study_id, template_trial, session)

    setattr(storage, INSERT_STEP, find_or_insert)
