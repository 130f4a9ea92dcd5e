"""Opening an MLflow tracking store: which URI, the folder's SQLite file created whole, the suite's experiment and
its parent run. Shared by the live logger (tracker.py) and `sync` (sync.py), so both find the same experiment and
parent.

The URI: an explicit one (`--tracking-uri`), else MLFLOW_TRACKING_URI, else `sqlite:///OUT/mlflow.db` (never MLflow's
default `./mlflow.db`). The folder's SQLite store is a view the ledger rebuilds at any time (`normbench sync`), so it
is written without an fsync per transaction (`PRAGMA synchronous=OFF`: a crashed process loses nothing, only a
crashed machine can, and a sync repairs that); that makes syncing a folder several times faster.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

from normbench.contracts.names import OutputFolder
from normbench.store.locks import folder_lock

PARENT_RUN = "leaderboard"  # the suite's parent run: holds the leaderboard files; every cell is nested under it
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"  # MLflow 3: a model-training experiment
_UNSYNCED: set[Path] = set()  # SQLite files whose connections skip the fsync (see the module docstring)


# Fail fast on an unreachable server instead of MLflow's minutes of retries (nothing waits on MLflow any more: the
# next sync repairs what a write missed). A connection per session (NullPool), so a store file deleted or replaced
# mid-run is seen at its path, not written through a connection to the old file. A user's own setting wins.
MLFLOW_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
                   "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SQLALCHEMYSTORE_POOLCLASS": "NullPool"}


def configure_mlflow() -> None:
    """normbench's MLflow defaults, set in this process before it opens a client or starts a server (MLflow reads
    them from the environment); never at import."""
    for name, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(name, value)


def tracking_uri(out_dir: Path, explicit: str | None = None) -> str:
    return (explicit or os.environ.get("MLFLOW_TRACKING_URI")
            or f"sqlite:///{Path(out_dir).resolve() / OutputFolder.MLFLOW_DB}")


def own_store(uri: str, out_dir: Path) -> bool:
    """Whether `uri` is the folder's own SQLite store (created here, with its artifacts beside it)."""
    return uri == f"sqlite:///{Path(out_dir).resolve() / OutputFolder.MLFLOW_DB}"


def open_client(uri: str, out_dir: Path) -> Any:
    """An MlflowClient on `uri`; the folder's own store is created first (whole, under the folder's lock)."""
    quiet_mlflow_logging()
    from mlflow.tracking import MlflowClient

    if own_store(uri, out_dir):
        db = OutputFolder(out_dir).mlflow_db.resolve()
        _skip_fsync(db)
        create_sqlite_store(Path(out_dir))
    return MlflowClient(tracking_uri=uri)


def experiment_id(client: Any, name: str, uri: str, out_dir: Path) -> str:
    """The suite's experiment, created (model-training kind, artifacts in OUT/mlartifacts on a local store) when
    missing."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    local = uri.startswith("sqlite:")
    artifacts = (Path(out_dir).resolve() / OutputFolder.MLFLOW_ARTIFACTS).as_uri() if local else None
    try:
        return client.create_experiment(name, artifact_location=artifacts, tags={KIND_TAG: KIND})
    except MlflowException:  # another process created it a moment ago
        return client.get_experiment_by_name(name).experiment_id


def parent_run(client: Any, experiment: str, tags: dict[str, str]) -> str:
    """The suite's `leaderboard` run with these tags (the folder's ledger and recipe: a new ledger on a shared server
    gets its own), the oldest if processes raced; created FINISHED (a container, never RUNNING) when missing."""
    query = " and ".join([f"tags.kind = '{PARENT_RUN}'", *(f"tags.{k} = '{v}'" for k, v in tags.items())])

    def oldest() -> str | None:
        runs = client.search_runs([experiment], query, max_results=1, order_by=["attributes.start_time ASC"])
        return runs[0].info.run_id if runs else None

    if (found := oldest()) is not None:
        return found
    mine = client.create_run(experiment, run_name=PARENT_RUN, tags={"kind": PARENT_RUN, **tags}).info.run_id
    client.set_terminated(mine, "FINISHED")
    kept = oldest() or mine
    if kept != mine:  # another process made one first: keep one parent
        client.delete_run(mine)
    return kept


def describe_error(error: BaseException) -> str:
    """`Type: first line` of the error at the root of `error`'s chain: what went wrong (`OperationalError: attempt
    to write a readonly database`, `ConnectionRefusedError: ...`), not MLflow's or SQLAlchemy's wrapping of it."""
    seen: set[int] = set()
    while (inner := error.__cause__ or error.__context__) is not None and id(error) not in seen:
        seen.add(id(error))
        error = inner
    lines = [line.strip() for line in str(error).splitlines()
             if line.strip() and not line.strip().startswith("(raised as a result of")]
    return f"{type(error).__name__}: {lines[0][:300]}" if lines else type(error).__name__


def quiet_mlflow_logging() -> None:
    """MLflow's and alembic's INFO lines ("Creating initial MLflow database tables...") say nothing a user acts on;
    MLflow's log line with a traceback for each database error neither (normbench says what failed, once)."""
    configure_mlflow()  # before any MLflow client or server: called first by all of them
    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def create_sqlite_store(out_dir: Path) -> None:
    """Create `<out>/mlflow.db` atomically: under the folder's lock (N runs started at once wait for the first), in a
    temporary file renamed into place, so a kill -9 during MLflow's table creation leaves no half-made store. An
    empty file (what SQLite leaves when it opens a deleted store's path) counts as missing."""
    db = OutputFolder(out_dir).mlflow_db
    if _has_store(db):
        return
    with folder_lock(out_dir):
        if _has_store(db):
            return
        for stale in out_dir.glob(".mlflow.db.creating-*"):  # left by a process killed while creating
            stale.unlink(missing_ok=True)
        # a name of its own each time: MLflow keeps the store it opened per URI, tables checked once, for the process
        tmp = (out_dir / f".mlflow.db.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}").resolve()
        from mlflow.tracking import MlflowClient

        _skip_fsync(tmp)
        MlflowClient(tracking_uri=f"sqlite:///{tmp}").search_experiments(max_results=1)  # makes the schema
        with open(tmp, "rb+") as f:  # once, before the rename: the file is whole on disk when it takes the name
            os.fsync(f.fileno())
        tmp.replace(db)


def _has_store(db: Path) -> bool:
    try:
        return db.stat().st_size > 0
    except FileNotFoundError:
        return False


def _skip_fsync(path: Path) -> None:
    """SQLite connections to `path` (and only to it: a ledger on SQLite keeps its fsyncs) skip the fsync."""
    import sqlalchemy

    if not _UNSYNCED:
        sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", _on_connect)
    _UNSYNCED.add(path.resolve())


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    if type(dbapi_connection).__module__ != "sqlite3":
        return
    row = dbapi_connection.execute("PRAGMA database_list").fetchone()
    if row and row[2] and Path(row[2]).resolve() in _UNSYNCED:
        dbapi_connection.execute("PRAGMA synchronous=OFF")
