"""A ledger call's retries (Outage.call): transient errors are retried within the budget and said once; logic
errors never are; past the budget ServerUnreachableError (exit 3) names the URL with its password masked."""

from __future__ import annotations

import pytest
from optuna.exceptions import UpdateFinishedTrialError
from sqlalchemy.exc import IntegrityError, OperationalError

from normbench.errors import ServerUnreachableError
from normbench.store.retry import Outage, is_transient

URL = "postgresql://user:secret@db:5432/normbench"


class Flaky:
    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def get(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_transient_and_logic_errors_are_told_apart():
    refused = OperationalError("SELECT 1", {}, Exception("connection refused"))
    assert is_transient(refused) and is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert not is_transient(UpdateFinishedTrialError("finished")) and not is_transient(KeyError("run"))
    assert not is_transient(IntegrityError("INSERT", {}, Exception("duplicate key")))


def test_a_blip_is_waited_out_and_said_once(capsys, monkeypatch):
    monkeypatch.setenv("NORMBENCH_RETRY_SECONDS", "30")
    flaky = Flaky(3, ConnectionRefusedError("refused"))
    assert Outage(URL).call(flaky.get) == "ok" and flaky.calls == 4
    err = capsys.readouterr().err
    assert err.count("is unreachable") == 1 and "user:***@db" in err and "secret" not in err and "is back" in err


def test_a_logic_error_is_raised_at_once():
    flaky = Flaky(1, UpdateFinishedTrialError("trial 3 is finished"))
    with pytest.raises(UpdateFinishedTrialError):
        Outage(URL, seconds=30).call(flaky.get)
    assert flaky.calls == 1


def test_past_the_budget_exit_3_naming_the_url_then_fail_fast(monkeypatch):
    flaky, outage = Flaky(10**6, ConnectionRefusedError("refused")), Outage(URL, seconds=1)
    with pytest.raises(ServerUnreachableError) as info:
        outage.call(flaky.get)
    assert info.value.exit_code == 3 and "user:***@db:5432" in str(info.value) and "secret" not in str(info.value)
    calls = flaky.calls
    with pytest.raises(ServerUnreachableError):
        outage.call(flaky.get)  # once given up, on the way out (closing runs) it does not wait a second budget
    assert flaky.calls == calls + 1


class Nested:
    """A ledger call that makes another (Ledger.enqueue takes the queue lock through the same outage)."""

    def __init__(self, outage: Outage, failures: int) -> None:
        self.outage, self.failures, self.calls, self.outer_calls = outage, failures, 0, 0

    def outer(self) -> str:
        self.outer_calls += 1
        return self.outage.call(self.inner)

    def inner(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionRefusedError("refused")
        return "ok"


def test_a_retried_call_making_another_is_retried_once_from_the_outside():
    outage = Outage(URL, seconds=30)
    nested = Nested(outage, 2)
    assert outage.call(nested.outer) == "ok" and nested.calls == 3
    assert nested.outer_calls == 3  # the outer call is retried whole: no retry loop inside a retry loop
