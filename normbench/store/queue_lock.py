"""One worker at a time queues a study's cells on a PostgreSQL ledger.

Queueing is check-then-insert: workers started at once (a job array) would each see the same cells missing and
queue them twice; the claim keeps one copy (Ledger._duplicate) but fails the other, leaving a FAIL that trained
nothing in the ledger and dashboard. A session-level advisory lock keyed by the study name serializes queueing.
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
    """Hold the study's queue lock for the block (PostgreSQL only; freed with a dead session), waiting out an outage.
    A stalled holder (SIGSTOP) keeps its session: after `wait_seconds`, run unlocked (the claim keeps one copy)."""
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
