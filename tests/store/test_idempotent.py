"""Retries replay only what is safe to repeat: a ledger write whose answer was lost after it landed (the server
committed, then the connection reset) is looked up by its key, not sent again; a request refused before it left is
simply sent again; a write that cannot be looked up is not replayed. Checked on Optuna's RDBStorage over SQLite with
the lost answer made by a wrapper that performs the call and then raises the error a reset connection raises.
MLflow's writes are not retried at all (MLflow is a view of the ledger: tests/tracking/test_sync.py)."""

from __future__ import annotations

import contextlib
import functools

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from normbench.store.idempotent import TRIAL_KEY, unsafe_methods
from normbench.store.retry import NOT_LANDED, Outage, Unsafe, redact, retrying, undelivered

RESET = OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))


def lose_answers(obj, name: str, times: int = 1, error: Exception = RESET) -> list:
    """Make `obj.name` do its work and then raise `error`, `times` times (an answer lost after the commit)."""
    done: list = []
    method = getattr(obj, name)

    @functools.wraps(method)
    def call(*args, **kwargs):
        result = method(*args, **kwargs)
        done.append(result)
        if len(done) <= times:
            raise error
        return result

    setattr(obj, name, call)
    return done


class Counter:
    def __init__(self, error: Exception) -> None:
        self.applied, self.error = 0, error

    def add(self) -> int:
        self.applied += 1
        if self.applied == 1:
            raise self.error
        return self.applied


def test_a_refused_request_is_replayed_and_a_lost_answer_is_looked_up_first():
    refused = Counter(ConnectionRefusedError("refused"))  # never reached the server: replay
    outage = Outage("x", seconds=30)
    assert outage.call(refused.add, unsafe=Unsafe(landed=lambda: NOT_LANDED)) == 2 and refused.applied == 2
    lost = Counter(ConnectionResetError("reset by peer"))  # reached it: ask before replaying
    assert outage.call(lost.add, unsafe=Unsafe(landed=lambda: lost.applied)) == 1 and lost.applied == 1


def test_an_unsafe_write_with_no_way_to_look_it_up_is_not_replayed():
    lost = Counter(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionResetError):
        Outage("x", seconds=30).call(lost.add, unsafe=Unsafe())
    assert lost.applied == 1


def test_undelivered_is_told_from_maybe_applied():
    assert undelivered(OperationalError("SELECT 1", {}, Exception("could not connect to server: Connection refused")))
    assert not undelivered(RESET) and not undelivered(ConnectionResetError("reset"))
    assert not undelivered(Exception("Max retries exceeded (Caused by ProtocolError('Connection aborted.'))"))


def test_only_the_ledgers_writes_are_guarded_mlflows_are_the_next_syncs(tmp_path):
    assert unsafe_methods(MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")) == {}


@pytest.fixture
def rdb(tmp_path):
    return optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'optuna.db'}")


def test_a_trial_queued_whose_answer_was_lost_is_queued_once(rdb):
    created = lose_answers(rdb, "_create_new_trial")
    storage = retrying(rdb, what="db", seconds=30, private=("_create_new_trial",))
    study = optuna.create_study(storage=storage, study_name="s")
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs={"cell_id": "a"}))
    [trial] = study.get_trials(deepcopy=False)
    assert len(created) == 1 and trial.user_attrs == {"cell_id": "a"} and trial.system_attrs[TRIAL_KEY]


def test_a_copy_of_a_trial_is_queued_as_a_new_trial(rdb):
    """A re-queued copy carries its original's system attrs, key included: it must not be taken for the original."""
    study = optuna.create_study(storage=retrying(rdb, what="db", seconds=30, private=("_create_new_trial",)))
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs={"cell_id": "a"}))
    [first] = study.get_trials(deepcopy=False)
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs=first.user_attrs,
                                              system_attrs=first.system_attrs))
    keys = [t.system_attrs[TRIAL_KEY] for t in study.get_trials(deepcopy=False)]
    assert len(keys) == 2 and len(set(keys)) == 2


def test_optunas_own_retry_of_a_lost_commit_finds_the_trial_instead_of_adding_one(rdb, monkeypatch):
    from optuna.storages._rdb import storage as rdb_module

    scoped, armed = rdb_module._create_scoped_session, [True]

    @contextlib.contextmanager
    def commit_then_lose_the_answer(scoped_session, ignore_integrity_error=False):
        with scoped(scoped_session, ignore_integrity_error) as session:
            yield session
        if armed and armed.pop():  # Optuna converts a failed commit to this, and retries the creation itself
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from RESET

    storage = retrying(rdb, what="db", seconds=30, private=("_create_new_trial",))
    study = optuna.create_study(storage=storage, study_name="s")
    monkeypatch.setattr(rdb_module, "_create_scoped_session", commit_then_lose_the_answer)
    study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs={"cell_id": "a"}))
    assert not armed and [t.user_attrs["cell_id"] for t in study.get_trials(deepcopy=False)] == ["a"]


def test_a_trial_finished_whose_answer_was_lost_is_finished_not_lost(rdb):
    study = optuna.create_study(storage=rdb, study_name="s")
    study.enqueue_trial({})
    [waiting] = study.get_trials(deepcopy=False)
    assert rdb.set_trial_state_values(waiting._trial_id, TrialState.RUNNING)
    applied = lose_answers(rdb, "set_trial_state_values")
    storage = retrying(rdb, what="db", seconds=30)
    optuna.load_study(study_name="s", storage=storage).tell(waiting.number, 0.5)  # no UpdateFinishedTrialError
    assert applied == [True] and storage.get_trial(waiting._trial_id).state == TrialState.COMPLETE


def test_a_password_is_masked_wherever_the_url_holds_it():
    assert redact("postgresql://team_a:s3cret@db:5432/normbench") == "postgresql://team_a:***@db:5432/normbench"
    assert redact("postgresql://db/normbench?user=a&password=s3cret&sslmode=require") == (
        "postgresql://db/normbench?user=a&password=***&sslmode=require")
    assert redact("postgresql://team_a@db/normbench") == "postgresql://team_a@db/normbench"  # .pgpass: nothing to mask
