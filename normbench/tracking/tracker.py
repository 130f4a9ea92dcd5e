"""MLflow: one experiment per suite, one run per cell. The only module that imports mlflow.

The tracking URI is MLFLOW_TRACKING_URI when set, else a SQLite store in the suite's output folder (never MLflow's
default `./mlflow.db`). Per-epoch metrics are buffered and written with `log_batch` at most every few seconds, so
logging stays a small fraction of a cell's time. A server that goes away mid-run is waited for
(normbench.store.retry); a summary that cannot be logged in that time is spooled in `<out>/mlflow-spool/` and
logged by the next run (tracking/spool.py). A local SQLite store that breaks (deleted, read-only, disk full) is named
at once instead (tracking/local_store.py). The suite's parent run is the folder's: tagged with its recipe and its
ledger, so a new ledger (after `rm -rf OUT`) or recipe on a shared MLFLOW_TRACKING_URI gets a parent of its own.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from normbench.errors import ServerUnreachableError
from normbench.spec.names import OutputFolder
from normbench.spec.results import CellResult
from normbench.spec.selection import cell_scores
from normbench.store.idempotent import RUN_KEY
from normbench.store.locks import folder_lock
from normbench.store.retry import retrying
from normbench.tracking import spool
from normbench.tracking.local_store import TrackingStoreError, guard
from normbench.tracking.naming import logged_blocks, run_name, telemetry_metric

# Fail fast on an unreachable server instead of MLflow's minutes of retries; users may override either. No retries
# inside MLflow: it replays any request whose answer was lost, a create_run too (a second run); normbench's own
# retries (store/retry.py) replay only what is safe to repeat.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

EPOCH_METRICS = ("train_loss", "val_top1", "lr", "grad_norm", "images_per_sec")
# The record's `lr` is the schedule's value at that epoch; `lr` is also an axis (a param), so the metric is renamed.
METRIC_NAMES = {"lr": "scheduled_lr"}
FLUSH_SECONDS = 5.0
PARENT_RUN = "leaderboard"  # the suite's parent run: holds the leaderboard files; every cell is nested under it


def tracking_uri(out_dir: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(out_dir).resolve() / OutputFolder.MLFLOW_DB}"


class Tracker:
    """Writes cells to MLflow. Construct once per process; it checks the server is reachable.

    `parent_tags` (the folder's recipe hash and ledger id) name the suite's parent run; `replay=False` leaves the
    spool for an explicit `replay_spool()` (a run replays it only once it is not refused)."""

    def __init__(self, out_dir: Path, experiment: str, *, parent_tags: dict[str, str] | None = None,
                 replay: bool = True) -> None:
        from mlflow.tracking import MlflowClient

        quiet_mlflow_logging()
        self.uri = tracking_uri(out_dir)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.spool_dir = OutputFolder(out_dir).mlflow_spool
        self.own_store = not os.environ.get("MLFLOW_TRACKING_URI")  # the folder's mlflow.db: only its runs
        self.parent_tags = {k: v for k, v in (parent_tags or {}).items() if v}
        if self.uri.startswith("sqlite:") and self.own_store:
            create_sqlite_store(Path(out_dir))
        self.client = guard(MlflowClient(tracking_uri=self.uri), self.uri, Path(out_dir))
        try:
            found = self.client.get_experiment_by_name(experiment)
            if found is not None:
                self.experiment_id = found.experiment_id
            else:
                local = self.uri.startswith("sqlite:")
                artifacts = (Path(out_dir).resolve() / OutputFolder.MLFLOW_ARTIFACTS).as_uri() if local else None
                self.experiment_id = self._create(experiment, artifacts)
        except TrackingStoreError:
            raise
        except Exception as e:  # MlflowException, requests' errors, sqlalchemy's: all mean "cannot track"
            raise ServerUnreachableError(
                f"cannot reach the MLflow tracking store {self.uri}: {type(e).__name__}: {str(e).splitlines()[0]}\n"
                "Start it (`mlflow server --host 0.0.0.0 --port 5000 --backend-store-uri ...`) or unset "
                "MLFLOW_TRACKING_URI to log to the output folder. Nothing finished is lost."
            ) from None
        self._buffer: dict[str, list[Any]] = {}
        self._last_flush: dict[str, float] = {}
        self._parent: str | None = None
        self.client = retrying(self.client, what=f"the MLflow tracking store {self.uri}")
        if replay:
            self.replay_spool()

    def _create(self, name: str, artifacts: str | None) -> str:
        from mlflow.exceptions import MlflowException

        try:  # the model-training kind: MLflow 3's UI otherwise opens a new experiment on its GenAI pages
            return self.client.create_experiment(name, artifact_location=artifacts,
                                                 tags={"mlflow.experimentKind": "custom_model_development"})
        except MlflowException:  # another worker created it a moment ago
            return self.client.get_experiment_by_name(name).experiment_id  # type: ignore[union-attr]

    def start(self, cell_id: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """Open a run for a cell, nested under the suite's parent run, with every axis and recipe value as a param
        (see `one_param_per_axis`); returns the run id. A cell's second attempt (after a crash or kill) is named
        `d36 layerscale lr3e-3 s0 #2` (tracking/naming.py), so it is told apart from the run it replaces. Found or
        created by its key (the parent run, study and trial number: one attempt of the cell in this folder), so a
        start replayed after a lost answer opens no second run."""
        from mlflow.entities import Param, RunTag

        # the parent names the folder's ledger and recipe: an old folder's trial 0 (after `rm -rf OUT` on a shared
        # server) has another key
        key = (f"{self.parent_run_id()}/{tags['study']}#{tags['trial']}" if "study" in tags and "trial" in tags
               else uuid.uuid4().hex)
        attempt, run = self._attempt(cell_id, tags.get("study", ""), key)
        if run is None:  # (a lost answer of create_run itself is looked up by the same key: store/idempotent.py)
            name = run_name(cell_id, attempt)
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={**default_tags(), **tags, "cell_id": cell_id, "attempt": str(attempt),
                                               RUN_KEY: key, "mlflow.parentRunId": self.parent_run_id()})
        items = [Param(k, str(v)[:6000]) for k, v in one_param_per_axis(params).items()]
        for i in range(0, len(items), 100):  # MLflow caps a batch at 100 params; the same values again are fine
            self.client.log_batch(run.info.run_id, params=items[i:i + 100], tags=[RunTag("status", "running")])
        return run.info.run_id

    def _attempt(self, cell_id: str, study: str, key: str) -> tuple[int, Any]:
        """(1 + the runs this cell already has in this study (killed, crashed, or closed by a dead worker), the run
        keyed `key` among them or None): one search."""
        query = f"tags.cell_id = '{cell_id}' and tags.study = '{study}'"
        query += f" and tags.`mlflow.parentRunId` = '{self.parent_run_id()}'"  # this folder's runs, not an old one's
        runs = self.client.search_runs([self.experiment_id], query, max_results=1000)
        mine = [r for r in runs if r.data.tags.get(RUN_KEY) == key]
        if mine:
            return int(mine[0].data.tags.get("attempt", len(runs))), mine[0]
        return len(runs) + 1, None

    def parent_run_id(self) -> str:
        """The suite's `leaderboard` run, created on first use. Workers racing to create it keep the oldest."""
        if self._parent is None:
            self._parent = self._find_parent() or self._create_parent()
        return self._parent

    def _find_parent(self) -> str | None:
        """The oldest parent run with this folder's `parent_tags`. On the folder's own store, a parent from before
        parents carried them is this folder's: it is adopted (and tagged)."""
        tagged = [f"tags.{key} = '{value}'" for key, value in self.parent_tags.items()]
        query = " and ".join([f"tags.kind = '{PARENT_RUN}'", *tagged])
        runs = self.client.search_runs([self.experiment_id], query, max_results=100,
                                       order_by=["attributes.start_time ASC"])
        if runs or not (self.own_store and self.parent_tags):
            return runs[0].info.run_id if runs else None
        legacy = [r for r in self.client.search_runs([self.experiment_id], f"tags.kind = '{PARENT_RUN}'",
                                                     max_results=100, order_by=["attributes.start_time ASC"])
                  if not set(self.parent_tags) & set(r.data.tags)]
        if not legacy:
            return None
        for key, value in self.parent_tags.items():
            self.client.set_tag(legacy[0].info.run_id, key, value)
        return legacy[0].info.run_id

    def _create_parent(self) -> str:
        mine = self.client.create_run(self.experiment_id, run_name=PARENT_RUN,
                                      tags={"kind": PARENT_RUN, **self.parent_tags}).info.run_id
        self.client.set_terminated(mine, "FINISHED")  # a container, never RUNNING: close_orphans leaves it alone
        oldest = self._find_parent() or mine
        if oldest != mine:
            self.client.delete_run(mine)
        return oldest

    def log_epoch(self, run_id: str, record: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._buffer.setdefault(run_id, []).extend(
            Metric(METRIC_NAMES.get(k, k), float(record[k]), now, int(record["epoch"]))
            for k in EPOCH_METRICS if k in record)
        if time.monotonic() - self._last_flush.get(run_id, 0.0) > FLUSH_SECONDS:
            self.flush(run_id)

    def log_telemetry(self, run_id: str, records: list[dict[str, Any]]) -> None:
        """Telemetry (normbench/train/telemetry.py) as step metrics of the first, middle and last block, one per
        position and quantity, named `telemetry/last/grad_norm` (tracking/naming.py): charted after the model
        metrics. Buffered like the epochs; `summarize` flushes. None values are skipped."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        picks = logged_blocks(max((int(r["block"]) for r in records), default=0) + 1)
        self._buffer.setdefault(run_id, []).extend(
            Metric(telemetry_metric(position, k), float(v), now, int(r["step"]))
            for r in records for position, block in picks.items() if int(r["block"]) == block
            for k, v in r.items() if k not in ("step", "block") and v is not None)

    def flush(self, run_id: str) -> None:
        metrics = self._buffer.get(run_id, [])
        while metrics:  # MLflow caps a batch at 1000 metrics; what is not logged stays buffered
            self.client.log_batch(run_id, metrics=metrics[:1000])
            del metrics[:1000]
        self._buffer.pop(run_id, None)
        self._last_flush[run_id] = time.monotonic()

    def summarize(self, run_id: str, result: CellResult) -> None:
        """Summary metrics that sort in the UI's table and the status tag; `close` marks the run FINISHED after
        the ledger has the cell, so a crash in between is repaired (not duplicated) by the next run."""
        from mlflow.entities import Metric, RunTag

        summary = {"best_val_top1": result.best_val_top1, "final_val_top1": result.final_val_top1,
                   "diverged": float(result.status == "diverged"), "epochs_run": result.epochs_run,
                   "images_per_sec_mean": result.images_per_sec, "params": result.params,
                   "cell_seconds": result.seconds, **cell_scores(result.summary())}
        try:
            self.flush(run_id)
            now = int(time.time() * 1000)
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in summary.items()],
                                  tags=[RunTag("status", result.status)])
        except ServerUnreachableError:  # the server is away past the retry budget: keep it for the next run
            self._spool(run_id, result.status, summary)
            raise

    def _spool(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        """Keep what the store could not take (epoch metrics still buffered, the summary) for `replay_spool`."""
        pending = [[m.key, m.value, m.timestamp, m.step] for m in self._buffer.pop(run_id, [])]
        now = int(time.time() * 1000)
        pending += [[k, float(v), now, 0] for k, v in summary.items() if v is not None]
        spool.write(self.spool_dir, run_id, status, pending)

    def replay_spool(self) -> None:
        """Log the summaries spooled while the store was away and close their runs FINISHED (tracking/spool.py)."""
        spool.replay(self.client, self.spool_dir, self.uri)

    def close(self, run_id: str) -> None:
        self.client.set_terminated(run_id, "FINISHED")

    def fail(self, run_id: str, status: str = "FAILED") -> None:
        """End a run that will not finish (crash, lost worker, Ctrl-C) so it never stays RUNNING."""
        from mlflow.entities import RunTag

        try:
            self.client.log_batch(run_id, tags=[RunTag("status", status.lower())])
            self.client.set_terminated(run_id, status)
        except Exception:  # a run that no longer exists needs no closing
            pass

    def log_artifacts(self, folder: Path) -> None:
        """Leaderboard files (.md, .csv, .png in `folder`) as artifacts of the suite's parent `leaderboard` run."""
        run_id = self.parent_run_id()
        for path in sorted(Path(folder).glob("*")):
            if path.suffix in (".md", ".csv", ".png"):
                self.client.log_artifact(run_id, str(path))


def one_param_per_axis(params: dict[str, Any]) -> dict[str, Any]:
    """An axis (`layer`, `lr`) replaces its recipe key (`model.layer`, `train.lr`), so each shows once in the UI."""
    axes = [k for k in params if "." not in k]
    dropped = {f"{section}.{k}" for k in axes for section in ("model", "train", "data")}
    return {k: v for k, v in params.items() if k not in dropped}


def quiet_mlflow_logging() -> None:
    """MLflow's and alembic's INFO lines on creating a store ("Creating initial MLflow database tables...") say
    nothing a user acts on; warnings still show."""
    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)


def create_sqlite_store(out_dir: Path) -> None:
    """Create `<out>/mlflow.db` atomically: under the folder's lock (N runs started at once wait for the first), in a
    temporary file renamed into place, so a kill -9 during MLflow's table creation leaves no half-made store."""
    db = OutputFolder(out_dir).mlflow_db
    if db.exists():
        return
    with folder_lock(out_dir):
        if db.exists():
            return
        for stale in out_dir.glob(".mlflow.db.creating-*"):  # left by a process killed while creating
            stale.unlink(missing_ok=True)
        tmp = out_dir / f".mlflow.db.creating-{os.getpid()}"
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=f"sqlite:///{tmp.resolve()}").search_experiments(max_results=1)  # makes the schema
        tmp.replace(db)


def default_tags() -> dict[str, str]:
    import timm
    import torch

    import normbench

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    return {"normbench_version": normbench.__version__, "torch_version": torch.__version__,
            "timm_version": timm.__version__, "device": device, "host": socket.gethostname()}


def running_run_ids(tracker: Tracker, with_trial: bool = False, *, study: str | None = None,
                    trial: int | None = None) -> Any:
    """Runs of this experiment still marked RUNNING (to be reconciled with the ledger); with `with_trial`, a dict
    run id -> (study tag, trial number tag) for those that carry them. `study` and `trial` narrow the search to one
    trial's runs (a worker reconciles every run once, at its start; then only the trials the ledger reclaims)."""
    query = "attributes.status = 'RUNNING'"
    if study is not None and trial is not None:
        query += f" and tags.study = '{study}' and tags.trial = '{trial}'"
    runs = tracker.client.search_runs([tracker.experiment_id], query, max_results=10000)
    if not with_trial:
        return [r.info.run_id for r in runs]
    return {r.info.run_id: (r.data.tags["study"], int(r.data.tags["trial"])) for r in runs
            if "study" in r.data.tags and r.data.tags.get("trial", "").isdigit()}
