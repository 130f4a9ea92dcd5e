"""What normbench/store/optuna_api.py takes from Optuna beyond its public API holds on the installed Optuna: a new
version that renames or moves any of it fails here, not in a worker mid-sweep."""

from __future__ import annotations

import inspect
import re

import optuna
import pytest
from optuna.storages import RDBStorage

from normbench.store.journal import replayable
from normbench.store.optuna_api import (
    INSERT_STEP,
    JOURNAL_OPS,
    SET_STATE,
    STATE_TIMES,
    TRIAL_KEY,
    TrialIds,
    find_trial_by_key,
)


def test_the_journal_op_codes_are_optunas():
    from optuna.storages.journal._storage import JournalOperation

    assert {op.value: op.name for op in JournalOperation} == {code: name for code, (name, _) in JOURNAL_OPS.items()}


def test_the_fields_checked_are_the_ones_optunas_replay_reads_without_a_default():
    from optuna.storages.journal import _storage

    source = inspect.getsource(_storage)
    for code, (name, fields) in JOURNAL_OPS.items():
        handler = re.search(rf"def _apply_{name.lower()}\(self, log: dict\[str, Any\]\) -> None:\n(.*?)\n    def ",
                            source, re.DOTALL)
        if handler is None:  # an operation the replay skips
            assert fields == () and f"JournalOperation.{name}:\n                # " in source, name
            continue
        body = handler.group(1)
        read = set(re.findall(r'log\["(\w+)"\]', body)) - set(re.findall(r'"(\w+)" in log', body)) | {"worker_id"}
        by_state = set(STATE_TIMES) if code == SET_STATE else set()
        assert read <= set(fields) | by_state | {"op_code"}, (name, read - set(fields))


def test_a_state_change_without_the_time_its_state_reads_is_not_replayable():
    start = {"op_code": SET_STATE, "worker_id": "w", "trial_id": 0, "state": 0, "values": None}
    assert not replayable(start) and replayable({**start, "datetime_start": "2026-01-01T00:00:00"})
    done = {**start, "state": 1, "values": [1.0]}
    assert not replayable(done) and replayable({**done, "datetime_complete": "2026-01-01T00:00:00"})


def test_the_insert_step_takes_what_the_hook_passes():
    assert list(inspect.signature(getattr(RDBStorage, INSERT_STEP)).parameters) == [
        "self", "study_id", "template_trial", "session"]


def test_trial_ids_by_public_calls_match_the_storages_own(tmp_path):
    storage = RDBStorage(f"sqlite:///{tmp_path / 'l.db'}")
    study = optuna.create_study(study_name="s", storage=storage)
    for _ in range(3):
        study.enqueue_trial({})
    ids = TrialIds(storage)
    for trial in storage.get_all_trials(storage.get_study_id_from_name("s")):
        assert ids.of(study, trial.number) == trial._trial_id
    assert ids.of(study, 2) != ids.of(study, 1)


@pytest.fixture
def rdb(tmp_path):
    return RDBStorage(f"sqlite:///{tmp_path / 'l.db'}")


def test_a_try_that_finds_its_key_returns_the_committed_trial_instead_of_inserting(rdb):
    study = optuna.create_study(study_name="s", storage=rdb)
    find_trial_by_key(rdb)
    template = optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING, system_attrs={TRIAL_KEY: "abc"})
    first = rdb.create_new_trial(rdb.get_study_id_from_name("s"), template)
    again = rdb.create_new_trial(rdb.get_study_id_from_name("s"), template)  # a retry after a lost commit answer
    assert again == first and len(study.trials) == 1
    other = optuna.trial.create_trial(state=optuna.trial.TrialState.WAITING, system_attrs={TRIAL_KEY: "def"})
    assert rdb.create_new_trial(rdb.get_study_id_from_name("s"), other) != first and len(study.trials) == 2
