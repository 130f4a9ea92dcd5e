"""log_batches, the one writer of params, metrics and tags for sync and live logging: within MLflow's caps per call
(100 params, 100 tags, 1000 entities), everything written once, in as few calls as the caps allow."""

from __future__ import annotations

from normbench.store.retry import causes
from normbench.tracking.mlflow_store import describe_error, log_batches, open_client, sqlite_file


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def log_batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        self.calls.append({"metrics": list(metrics), "params": list(params), "tags": list(tags)})


def test_batches_keep_within_mlflows_caps_and_write_everything_once() -> None:
    client = Recorder()
    params = {f"p{i}": str(i) for i in range(250)}
    tags = {f"t{i}": str(i) for i in range(120)}
    points = [("m", float(i), 0, i) for i in range(2500)]
    log_batches(client, "run", params, points, tags)
    for call in client.calls:
        assert len(call["params"]) <= 100 and len(call["tags"]) <= 100
        assert len(call["params"]) + len(call["tags"]) + len(call["metrics"]) <= 1000
    assert sorted(p.key for c in client.calls for p in c["params"]) == sorted(params)
    assert sorted(t.key for c in client.calls for t in c["tags"]) == sorted(tags)
    assert [m.step for c in client.calls for m in c["metrics"]] == list(range(2500))
    assert len(client.calls) == 3  # 2870 entities: the fewest calls of at most 1000


def test_tags_alone_make_one_call_and_nothing_makes_none() -> None:
    client = Recorder()
    log_batches(client, "run", tags={"ledger_state": "COMPLETE"})
    assert [[t.key for t in c["tags"]] for c in client.calls] == [["ledger_state"]]
    log_batches(client, "run")
    assert len(client.calls) == 1


def test_an_error_is_described_by_the_root_of_its_chain_even_a_chain_that_loops() -> None:
    """store/retry.py `causes` walks the chain for the retry verdicts and for this message alike."""
    try:
        try:
            raise ConnectionRefusedError("[Errno 111] Connection refused\n(more detail)")
        except ConnectionRefusedError as root:
            raise RuntimeError("MLflow wrapped it") from root
    except RuntimeError as wrapped:
        error = wrapped
    assert describe_error(error) == "ConnectionRefusedError: [Errno 111] Connection refused"
    a, b = ValueError("a"), KeyError("b")
    a.__cause__, b.__cause__ = b, a  # a loop: each error once, then stop
    assert [type(e) for e in causes(a)] == [ValueError, KeyError]
    assert describe_error(a) == "KeyError: 'b'"


def test_a_named_sqlite_store_is_created_once_under_a_lock_not_by_each_worker(tmp_path) -> None:
    """Two workers opening a new store named by MLFLOW_TRACKING_URI both ran MLflow's migrations on it; the loser's
    `_alembic_tmp_*` tables then failed every later open and sync. Creation now waits for the folder's lock (held
    here, as a peer creating it would) and lands whole by a rename."""
    import threading
    import time

    from normbench.store.locks import folder_lock

    db = tmp_path / "stores" / "team.db"
    uri = f"sqlite:///{db}"
    assert sqlite_file(uri) == db and sqlite_file("sqlite://") is None and sqlite_file("http://h:5000") is None
    opened: list[object] = []
    db.parent.mkdir()
    with folder_lock(db.parent):
        worker = threading.Thread(target=lambda: opened.append(open_client(uri, tmp_path / "out").search_experiments()))
        worker.start()
        time.sleep(1.0)
        assert not db.exists() and not opened  # waits for the peer that holds the lock
    worker.join(timeout=120)
    assert opened and db.stat().st_size > 0
    assert not list(db.parent.glob(".team.db.creating-*"))
