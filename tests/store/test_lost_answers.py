"""Retries replay only what is safe to repeat: a ledger write whose answer was lost after it landed (the server
committed, then the connection reset) is looked up, not sent again; a request refused before it left is simply sent
again; a write that cannot be looked up is not replayed. Checked on a Ledger over SQLite (Optuna's RDBStorage) with
the lost answer made by a wrapper that performs the call and then raises the error a reset connection raises.
The same over a real PostgreSQL behind a proxy that drops answers: tests/faults/test_dropped_answer.py."""

from __future__ import annotations

import contextlib
import functools
import time

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy.exc import OperationalError

from normbench.contracts.results import CellResult
from normbench.store.attempts import ATTEMPTS, reclaim
from normbench.store.ledger import Ledger
from normbench.store.optuna_api import TRIAL_KEY
from normbench.store.retry import NOT_LANDED, Outage, redact, undelivered

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
    assert outage.call(refused.add, unsafe=True, landed=lambda: NOT_LANDED) == 2 and refused.applied == 2
    lost = Counter(ConnectionResetError("reset by peer"))  # reached it: ask before replaying
    assert outage.call(lost.add, unsafe=True, landed=lambda: lost.applied) == 1 and lost.applied == 1


def test_an_unsafe_write_with_no_way_to_look_it_up_is_not_replayed():
    lost = Counter(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionResetError):
        Outage("x", seconds=30).call(lost.add, unsafe=True)
    assert lost.applied == 1


def test_undelivered_is_told_from_maybe_applied():
    assert undelivered(OperationalError("SELECT 1", {}, Exception("could not connect to server: Connection refused")))
    assert not undelivered(RESET) and not undelivered(ConnectionResetError("reset"))
    assert not undelivered(Exception("Max retries exceeded (Caused by ProtocolError('Connection aborted.'))"))


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMBENCH_RETRY_SECONDS", "30")
    return Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, heartbeat_interval=1, grace_period=1)


def test_a_cell_queued_whose_answer_was_lost_is_queued_once(ledger):
    created = lose_answers(ledger.storage, "_create_new_trial")
    study = ledger.study("s")
    ledger.enqueue(study, {"lr=0.1": {"lr": 0.1}})  # retried whole: the second try finds the cell queued
    [trial] = ledger.trials(study)
    assert len(created) == 1 and trial.user_attrs["cell_id"] == "lr=0.1" and trial.system_attrs[TRIAL_KEY]


def test_a_copy_queued_again_gets_its_own_key(ledger):
    """A re-queued copy carries its original's system attrs: its key must be new, or it would be taken for it."""
    study = ledger.study("s")
    ledger.enqueue(study, {"lr=0.1": {"lr": 0.1}})
    claim = ledger.claim(study)
    claim.release()
    keys = [t.system_attrs[TRIAL_KEY] for t in ledger.trials(study)]
    assert len(keys) == 2 and len(set(keys)) == 2


def test_a_copy_queued_whose_answer_was_lost_is_queued_once(ledger):
    study = ledger.study("s")
    ledger.enqueue(study, {"lr=0.1": {"lr": 0.1}})
    claim = ledger.claim(study)
    created = lose_answers(ledger.storage, "_create_new_trial")
    claim.release()
    assert len(created) == 1
    assert sorted(t.state.name for t in ledger.trials(study)) == ["FAIL", "WAITING"]


def test_optunas_own_retry_of_a_lost_commit_finds_the_trial_instead_of_adding_one(ledger, monkeypatch):
    from optuna.storages._rdb import storage as rdb_module

    scoped, armed = rdb_module._create_scoped_session, [True]

    @contextlib.contextmanager
    def commit_then_lose_the_answer(scoped_session, ignore_integrity_error=False):
        with scoped(scoped_session, ignore_integrity_error) as session:
            yield session
        if armed and armed.pop():  # Optuna converts a failed commit to this, and retries the creation itself
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from RESET

    study = ledger.study("s")
    monkeypatch.setattr(rdb_module, "_create_scoped_session", commit_then_lose_the_answer)
    ledger.enqueue(study, {"lr=0.1": {"lr": 0.1}})
    assert not armed and [t.user_attrs["cell_id"] for t in ledger.trials(study)] == ["lr=0.1"]


def test_a_cell_finished_whose_answer_was_lost_is_finished_not_lost(ledger):
    study = ledger.study("s")
    ledger.enqueue(study, {"lr=0.1": {"lr": 0.1}})
    claim = ledger.claim(study)
    applied = lose_answers(ledger.storage, "set_trial_state_values")
    claim.finish(CellResult.from_summary({"status": "ok", "best_val_top1": 50.0}))  # no ClaimLostError
    assert applied == [True] and claim.frozen().state == TrialState.COMPLETE and claim.held()


def test_a_stale_trial_failed_whose_answer_was_lost_is_still_counted_and_queued_again(ledger):
    """Optuna calls back only for the stale trials whose FAIL answered; one whose answer was lost is found after."""
    study = ledger.study("s")
    ledger.enqueue(study, {"lr=0.1": {"lr": 0.1}})
    claim = ledger.claim(study)  # and no heartbeat thread: its worker is as good as dead
    time.sleep(2.5)  # past the 1 s grace
    failed = lose_answers(ledger.storage, "set_trial_state_values")
    assert [t.number for t in reclaim(ledger, study)] == [claim.number] and failed == [True]
    waiting = ledger.trials(study, (TrialState.WAITING,))
    assert len(waiting) == 1 and len(waiting[0].user_attrs[ATTEMPTS]) == 1
    assert "no heartbeat" in waiting[0].user_attrs[ATTEMPTS][0]["verdict"]


def test_a_password_is_masked_wherever_the_url_holds_it():
    assert redact("postgresql://team_a:s3cret@db:5432/normbench") == "postgresql://team_a:***@db:5432/normbench"
    assert redact("postgresql://db/normbench?user=a&password=s3cret&sslmode=require") == (
        "postgresql://db/normbench?user=a&password=***&sslmode=require")
    assert redact("postgresql://team_a@db/normbench") == "postgresql://team_a@db/normbench"  # .pgpass: nothing to mask
