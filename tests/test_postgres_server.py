"""The throwaway PostgreSQL server from tests/postgres_server.py works, also for Optuna across processes."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from tests.postgres_server import fresh_database, fresh_postgres_url, postgres_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.postgres


def _scalar(url: str, sql: str):
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sqlalchemy.text(sql))
            return result.scalar() if result.returns_rows else None
    finally:
        engine.dispose()


def test_server_accepts_connections_and_round_trips(postgres_url: str) -> None:  # noqa: F811
    assert postgres_url.startswith("postgresql+psycopg2://")
    assert "@127.0.0.1:" in postgres_url
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text("CREATE TEMPORARY TABLE roundtrip (v text)"))
            conn.execute(sqlalchemy.text("INSERT INTO roundtrip VALUES (:v)"), {"v": "hello"})
            assert conn.execute(sqlalchemy.text("SELECT v FROM roundtrip")).scalars().all() == ["hello"]
            assert conn.execute(sqlalchemy.text("SELECT current_database()")).scalar() == "normbench_test"
    finally:
        engine.dispose()


def test_fresh_databases_are_distinct(fresh_postgres_url: str, postgres_url: str) -> None:  # noqa: F811
    with fresh_database(postgres_url) as other_url:
        names = {_scalar(u, "SELECT current_database()") for u in (postgres_url, fresh_postgres_url, other_url)}
        assert len(names) == 3
        # A table made in one fresh database is invisible in the other.
        _scalar(fresh_postgres_url, "CREATE TABLE only_here (v int)")
        assert _scalar(fresh_postgres_url, "SELECT to_regclass('only_here') IS NOT NULL")
        assert not _scalar(other_url, "SELECT to_regclass('only_here') IS NOT NULL")


def _drain_queue(url: str, study_name: str, barrier) -> None:
    """Worker process: run enqueued trials until the queue is empty."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=optuna.storages.RDBStorage(url))
    barrier.wait(timeout=120)  # start asking together so the two processes really race
    while True:
        trial = study.ask()
        frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
        if "fixed_params" not in frozen.system_attrs:
            # Queue empty: ask() made a new sampler trial instead of popping one; discard it.
            study.tell(trial, state=TrialState.FAIL)
            return
        x = trial.suggest_int("x", 0, 3)
        trial.set_user_attr("pid", os.getpid())
        time.sleep(0.2)  # hold the trial so the other process must pick a different one
        study.tell(trial, x)


def test_optuna_queue_is_shared_by_two_processes(fresh_postgres_url: str) -> None:  # noqa: F811
    storage = optuna.storages.RDBStorage(fresh_postgres_url)
    study = optuna.create_study(study_name="queue", storage=storage)
    for i in range(4):
        study.enqueue_trial({"x": i})

    # spawn, not fork: a forked child would share the parent's pooled connections.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [ctx.Process(target=_drain_queue, args=(fresh_postgres_url, "queue", barrier)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0]

    completed = study.get_trials(states=(TrialState.COMPLETE,))
    assert Counter(t.params["x"] for t in completed) == Counter({0: 1, 1: 1, 2: 1, 3: 1})
    assert sorted(t.value for t in completed) == [0, 1, 2, 3]
    assert not study.get_trials(states=(TrialState.WAITING, TrialState.RUNNING))
    storage.engine.dispose()
