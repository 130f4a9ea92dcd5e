"""Opening an MLflow store, shared by tracker.py, sync.py and `normbench ui` so all find one experiment and parent run.
URI: `--tracking-uri`, else MLFLOW_TRACKING_URI, else `sqlite:///OUT/mlflow.db` (never MLflow's `./mlflow.db`). That
folder store is a view a sync repairs, so it skips per-transaction fsyncs (`PRAGMA synchronous=OFF`: only a machine
crash loses a write): syncs run several times faster.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from normbench.contracts.names import OutputFolder
from normbench.store.locks import folder_lock
from normbench.store.retry import causes

PARENT_RUN = "leaderboard"  # the suite's parent run: holds the leaderboard files; every cell is nested under it
ARTIFACTS = ("leaderboard.md", "*.csv", "*.png", "*.svg")  # the parent run's files, from the output folder
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"  # MLflow 3: a model-training experiment
_UNSYNCED: set[Path] = set()  # SQLite files whose connections skip the fsync

Point = tuple[str, float, int, int]  # (key, value, timestamp ms, step): an MLflow metric point, before mlflow loads

# Fail fast on an unreachable server, not after MLflow's minutes of retries (the next sync repairs a missed write).
# NullPool, a connection per session: a store file deleted or replaced mid-run is seen at its path. User settings win.
MLFLOW_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
                   "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SQLALCHEMYSTORE_POOLCLASS": "NullPool"}


def tracking_uri(out_dir: Path, explicit: str | None = None) -> str:
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or _own_uri(out_dir)


def own_store(uri: str, out_dir: Path) -> bool:
    """Whether `uri` is the folder's own SQLite store (created here, with its artifacts beside it)."""
    return uri == _own_uri(out_dir)


def _own_uri(out_dir: Path) -> str:
    return f"sqlite:///{Path(out_dir).resolve() / OutputFolder.MLFLOW_DB}"


def open_client(uri: str, out_dir: Path) -> Any:
    """An MlflowClient on `uri`, creating the folder's own store first. Every normbench MLflow client and server starts
    here: sets MLFLOW_DEFAULTS (never at import) and quiets MLflow's and alembic's logs (normbench says what failed)."""
    for name, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(name, value)
    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    from mlflow.tracking import MlflowClient

    if own_store(uri, out_dir):
        _skip_fsync(OutputFolder(out_dir).mlflow_db)
        _create_sqlite_store(OutputFolder(out_dir).mlflow_db, Path(out_dir))
    elif (db := sqlite_file(uri)) is not None:  # a store the user named: its workers must not race to create it
        _create_sqlite_store(db, db.parent)
    return MlflowClient(tracking_uri=uri)


def sqlite_file(uri: str) -> Path | None:
    """The file of a `sqlite:///path` URI (relative to the working directory unless absolute); None for any other
    store and SQLite's in-memory one."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return None
    path = uri[len(prefix):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def experiment_id(client: Any, name: str, uri: str, out_dir: Path) -> str:
    """The suite's experiment, created when missing (model-training kind; artifacts in OUT/mlartifacts if local)."""
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
    """The suite's `leaderboard` run with these non-empty tags (ledger and recipe: a new ledger on a shared server gets
    its own), the oldest if processes raced; created FINISHED (a container, never RUNNING) when missing."""
    tags = {k: v for k, v in tags.items() if v}
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


def log_batches(client: Any, run_id: str, params: Mapping[str, str] | None = None, points: Iterable[Point] = (),
                tags: Mapping[str, str] | None = None) -> None:
    """Params, metrics, tags in as few log_batch calls as MLflow allows (100 params, 100 tags, 1000 entities a call)."""
    from mlflow.entities import Metric, Param, RunTag

    params_left = [Param(k, v) for k, v in (params or {}).items()]
    tags_left = [RunTag(k, v) for k, v in (tags or {}).items()]
    metrics_left = [Metric(*p) for p in points]
    while params_left or tags_left or metrics_left:
        ps, params_left = params_left[:100], params_left[100:]
        ts, tags_left = tags_left[:100], tags_left[100:]
        room = 1000 - len(ps) - len(ts)
        ms, metrics_left = metrics_left[:room], metrics_left[room:]
        client.log_batch(run_id, metrics=ms, params=ps, tags=ts)


def describe_error(error: BaseException) -> str:
    """`Type: first line` of the root error in `error`'s chain, not MLflow's or SQLAlchemy's wrapping of it."""
    *_, error = causes(error)
    lines = [line.strip() for line in str(error).splitlines()
             if line.strip() and not line.strip().startswith("(raised as a result of")]
    return f"{type(error).__name__}: {lines[0][:300]}" if lines else type(error).__name__


def _create_sqlite_store(db: Path, lock_dir: Path) -> None:
    """Create the SQLite store `db` under `lock_dir`'s lock, in a temp file renamed into place: two processes
    opening a new store at once (the workers of `run --workers 2`) would both run MLflow's migrations on it, and the
    loser's leaves `_alembic_tmp_*` tables that fail every later open; a kill -9 during MLflow's table creation
    leaves no half-made store. An empty file (SQLite's leftover at a deleted store's path) is missing."""
    if _has_store(db):
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(lock_dir):
        if _has_store(db):
            return
        for stale in db.parent.glob(f".{db.name}.creating-*"):  # left by a process killed while creating
            stale.unlink(missing_ok=True)
        # a name of its own each time: MLflow keeps the store it opened per URI, tables checked once, for the process
        tmp = (db.parent / f".{db.name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}").resolve()
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
