"""Live logging to MLflow while cells train, best effort: one background thread writes from a queue; training never
waits. A refused write (server down, queue full, store deleted, read-only or full) warns once; that run's later writes
are skipped (no `ledger_state` tag) for `normbench sync` to complete (every `normbench run` syncs at its end).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from normbench.contracts.results import CellResult
from normbench.store.retry import redact
from normbench.tracking import mlflow_store, run_record

MAX_PENDING = 10_000  # writes waiting for a slow store; past this a run's writes are dropped (sync repairs them)
DRAIN_SECONDS = 15.0  # how long the end of a run waits for the writes still queued


class Tracker:
    """Live runs, one per cell attempt, under `parent_tags`' `leaderboard` run; the store opens at the first write."""

    def __init__(self, out_dir: Path, experiment: str, *, parent_tags: dict[str, str] | None = None) -> None:
        self.out_dir, self.experiment = Path(out_dir), experiment
        self.uri = mlflow_store.tracking_uri(self.out_dir)
        self.parent_tags = parent_tags or {}
        self._queue: queue.Queue = queue.Queue(maxsize=MAX_PENDING)
        self._thread: threading.Thread | None = None
        self._opened: tuple[Any, str, str] | None = None  # (client, experiment id, parent run id), in the thread
        self._run_ids: dict[str, str] = {}  # handle -> MLflow run id
        self._broken: set[str] = set()  # handles with a write that did not land: skipped from then on
        self._abandoned = False  # finish() timed out: the thread writes nothing more (a sync is about to)
        self._warned = False

    # ------------------------------------------------------------------------- the training thread's calls

    def start(self, run: run_record.TrialRun) -> str:
        """Open the run of a claimed cell attempt (run_record.trial_run: its name, tags and params, as sync writes
        them); returns its handle at once."""
        handle = uuid.uuid4().hex
        self._put(handle, self._create, run.name, dict(run.params), dict(run.tags), _now())
        return handle

    def log_epoch(self, handle: str, record: Mapping[str, Any]) -> None:
        self._put(handle, self._log, run_record.epoch_points(record, _now()), {})

    def log_telemetry(self, handle: str, records: list[dict[str, Any]]) -> None:
        if records:
            self._put(handle, self._log, run_record.telemetry_points(records, _now()), {})

    def summarize(self, handle: str, result: CellResult) -> None:
        """The cell's final metrics, and the tags and params its result gives (run_record.result_tags, result_params),
        before the ledger records it; `close` after."""
        summary = result.summary()
        self._put(handle, self._log, run_record.final_points(summary, _now()), run_record.result_tags(summary), "",
                  run_record.result_params(summary))

    def log_artifact(self, handle: str, path: Path) -> None:
        """A file of the cell's (its kept weights) copied into the run's artifacts."""
        self._put(handle, self._artifact, str(path))

    def close(self, handle: str, state: str = "COMPLETE") -> None:
        """The ledger has recorded the cell (`state`, its trial's): the run says so and is FINISHED."""
        self._put(handle, self._log, [], {run_record.STATE_TAG: state}, "FINISHED")

    def fail(self, handle: str, status: str = "FAILED") -> None:
        """End a run that will not finish (crash, lost claim, Ctrl-C): FAILED or KILLED; sync settles it later."""
        self._put(handle, self._log, [], {"status": status.lower()}, status)

    def finish(self, timeout: float = DRAIN_SECONDS) -> None:
        """Wait up to `timeout` s for the queued writes (the end of a run, before it syncs); then write no more."""
        if self._thread is None:
            return
        drained = threading.Event()
        try:
            self._queue.put(drained, timeout=timeout)
        except queue.Full:
            pass
        if not drained.wait(timeout):
            self._say(f"MLflow ({redact(self.uri)}) did not take the last writes within {timeout:g} s")
        self._abandoned = True

    # ------------------------------------------------------------------------------------ the writer thread

    def _put(self, handle: str, write: Callable[..., None], *args: Any) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain, name="normbench-mlflow", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((handle, write, args))
        except queue.Full:  # the store is slower than training: this run is left to the next sync
            self._broken.add(handle)
            self._say(f"MLflow ({redact(self.uri)}) is too slow: {MAX_PENDING} writes are waiting")

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            handle, write, args = item
            if self._abandoned or handle in self._broken:
                continue
            try:
                write(handle, *args)
            except Exception as e:  # whatever MLflow or its database raise: this run is the next sync's
                self._broken.add(handle)
                self._say(f"MLflow ({redact(self.uri)}) did not take a write ({mlflow_store.describe_error(e)})")

    def _open(self) -> tuple[Any, str, str]:
        if self._opened is None:
            client = mlflow_store.open_client(self.uri, self.out_dir)
            experiment = mlflow_store.experiment_id(client, self.experiment, self.uri, self.out_dir)
            self._opened = client, experiment, mlflow_store.parent_run(client, experiment, self.parent_tags)
        return self._opened

    def _create(self, handle: str, name: str, params: dict[str, str], tags: dict[str, str], started: int) -> None:
        client, experiment, parent = self._open()
        run = client.create_run(experiment, start_time=started, tags={**tags, "mlflow.parentRunId": parent},
                                run_name=name)
        self._run_ids[handle] = run.info.run_id
        mlflow_store.log_batches(client, run.info.run_id, params)

    def _log(self, handle: str, points: list[mlflow_store.Point], tags: dict[str, str], end: str = "",
             params: dict[str, str] | None = None) -> None:
        client = self._open()[0]
        mlflow_store.log_batches(client, self._run_ids[handle], params, points=points, tags=tags)
        if end:
            client.set_terminated(self._run_ids[handle], end)

    def _artifact(self, handle: str, path: str) -> None:
        self._open()[0].log_artifact(self._run_ids[handle], path)

    def _say(self, what: str) -> None:
        """One warning per process: what failed and what repairs it."""
        if self._warned:
            return
        self._warned = True
        print(f"normbench: warning: {what}; training goes on, and the ledger keeps every result: `normbench sync "
              f"{self.out_dir}` brings MLflow up to date (a run tries at its end)", file=sys.stderr, flush=True)


def _now() -> int:
    return int(time.time() * 1000)
