"""MLflow summaries kept on disk while the tracking store cannot take them, and logged by the next run.

`write` keeps one run's pending metrics and status in `<out>/mlflow-spool/<run id>.json` (written whole, then
renamed: a failed or killed write leaves no spool and no temporary file for good). `replay` logs each spool and
closes its run FINISHED. A spool whose run the store does not have (the store was deleted or replaced, or
MLFLOW_TRACKING_URI changed since it was written) can never be replayed there: it is moved to
`mlflow-spool/unreplayable/` with one message saying how to log it, instead of stopping every later run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

UNREPLAYABLE = "unreplayable"
STALE_TMP_SECONDS = 60.0  # a temporary file this old belongs to no write in progress: a process killed mid-write


def write(spool_dir: Path, run_id: str, status: str, metrics: list[list[Any]]) -> Path | None:
    """Spool `metrics` ([key, value, timestamp, step]) and `status` for `run_id`; the spool's path, or None (said
    why) when the disk refuses it."""
    tmp = spool_dir / f".{run_id}.json.tmp"
    try:
        spool_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"run_id": run_id, "metrics": metrics, "status": status}))
        return tmp.replace(spool_dir / f"{run_id}.json")
    except OSError as e:
        tmp.unlink(missing_ok=True)
        _say(f"warning: {spool_dir}: cannot spool the MLflow summary of run {run_id} ({e.strerror or e}); the "
             "cell's result is kept in the ledger and results.csv, not in MLflow")
        return None


def replay(client: Any, spool_dir: Path, uri: str) -> None:
    """Log every spool in `spool_dir` to `client` and close its run FINISHED; set aside those whose run is gone."""
    from mlflow.entities import Metric, RunTag

    if not spool_dir.is_dir():
        return
    _drop_stale_tmp(spool_dir)
    aside: list[Path] = []
    for path in sorted(spool_dir.glob("*.json")):
        try:
            spooled = json.loads(path.read_text())
            run_id = spooled["run_id"]
        except FileNotFoundError:  # replayed by another worker meanwhile
            continue
        except (ValueError, KeyError, TypeError):
            aside.append(_set_aside(path))
            continue
        if not _run_exists(client, run_id):
            aside.append(_set_aside(path))
            continue
        metrics = [Metric(k, v, ts, step) for k, v, ts, step in spooled["metrics"]]
        for i in range(0, max(len(metrics), 1), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000], tags=[RunTag("status", spooled["status"])])
        client.set_terminated(run_id, "FINISHED")
        path.unlink(missing_ok=True)
    if aside:
        folder = spool_dir / UNREPLAYABLE
        _say(f"warning: {len(aside)} MLflow summary spool(s) in {spool_dir} name runs that {uri} does not have (the "
             "store was deleted or replaced, or MLFLOW_TRACKING_URI changed since they were spooled); moved to "
             f"{folder}. Their cells' results are in the ledger and results.csv. To log them, move them back into "
             f"{spool_dir} and run with the MLFLOW_TRACKING_URI they were spooled for.")


def _run_exists(client: Any, run_id: str) -> bool:
    """Whether the store has the run, active. Other errors (an outage past its budget) are raised."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(e).lower():
            return False
        raise


def _set_aside(path: Path) -> Path:
    folder = path.parent / UNREPLAYABLE
    folder.mkdir(exist_ok=True)
    target = folder / path.name
    os.replace(path, target)
    return target


def _drop_stale_tmp(spool_dir: Path) -> None:
    """A temporary spool left by a process killed while writing it: its cell was not recorded, so it runs again."""
    for tmp in spool_dir.glob(".*.json.tmp"):
        try:
            if time.time() - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                tmp.unlink()
        except OSError:
            pass


def _say(line: str) -> None:
    print(f"normbench: {line}", file=sys.stderr, flush=True)
