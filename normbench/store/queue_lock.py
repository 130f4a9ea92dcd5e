"""One worker at a time queues a study's cells on a PostgreSQL ledger.

Queueing is check-then-insert: a worker lists the cells already queued and adds the missing ones. Workers started
at once on a shared database (a job array, `ssh` in a loop) would each see the same cells missing and queue them
twice; the claim keeps one copy (Ledger._duplicate) but fails the other, which leaves a FAIL trial that trained
nothing in the ledger and the dashboard. A session-level advisory lock keyed by the study name serializes the
check and the inserts. A journal file (one folder, one host) and SQLite take no such lock.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from normbench.store.retry import Outage


def lock_key(study_name: str) -> int:
    """A signed 64-bit key (what pg_advisory_lock takes) that names the study's queue."""
    digest = hashlib.sha256(f"normbench queue {study_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextmanager
def queue_lock(storage: Any, outage: Outage | None, study_name: str, wait_seconds: float = 60.0) -> Iterator[None]:
    """Hold the study's queue lock while the block runs (a no-op unless `storage` is an RDBStorage on PostgreSQL).
    Taking it waits out an outage like any ledger call; if the connection dies while it is held, the server drops
    the lock with the session. A holder that stalls (SIGSTOP, a frozen VM) keeps its session alive: after
    `wait_seconds` the block runs without the lock, as the claim's duplicate rule still keeps one copy of a cell."""
    engine = getattr(storage, "engine", None)
    if engine is None or engine.dialect.name != "postgresql":
        yield
        return
    from sqlalchemy import text

    key = lock_key(study_name)

    def acquire() -> Any:
        connection = engine.connect()
        try:
            deadline = time.monotonic() + wait_seconds
            while not connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar():
                connection.commit()
                if time.monotonic() > deadline:
                    connection.close()
                    return None
                time.sleep(0.1)
            connection.commit()  # the lock outlives the transaction: no session idles inside one while it is held
        except BaseException:
            connection.invalidate()
            connection.close()
            raise
        return connection

    connection = outage.call(acquire) if outage is not None else acquire()
    try:
        yield
    finally:
        if connection is not None:
            try:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                connection.commit()
            except Exception:  # the session is gone (an outage): the server released the lock with it
                connection.invalidate()
            connection.close()
