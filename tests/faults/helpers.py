"""What every fault test checks afterwards, and how it starts, stops and signals normbench processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.store.ledger import Ledger
from tests.conftest import REPO

# Short heartbeats so a lost or stalled worker is noticed in seconds, not a minute.
FAST_HEARTBEAT = {"NORMBENCH_HEARTBEAT_INTERVAL": "1", "NORMBENCH_HEARTBEAT_GRACE": "6"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def normbench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m normbench ARGS` with one thread (tiny models; a busy 2-core machine), stderr captured."""
    return subprocess.Popen([sys.executable, "-m", "normbench", *map(str, args)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    """Wait for `proc`; returns (exit code, stderr) after checking stderr has no Python traceback."""
    _, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return proc.returncode, err


def trials(out: Path, suite: str, storage: str | None = None) -> list:
    return Ledger(storage, out).study(f"run:{suite}").get_trials(deepcopy=False)


def wait_for(predicate, timeout: float = 120, step: float = 0.2, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # the ledger or study does not exist yet
            pass
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def running(out: Path, suite: str, storage: str | None = None) -> bool:
    return any(t.state == TrialState.RUNNING for t in trials(out, suite, storage))


def assert_invariants(out: Path, suite: str, cells: list[str], *, storage: str | None = None,
                      tracking_uri: str | None = None, tracked: list[str] | None = None) -> None:
    """Every cell exactly once COMPLETE in the ledger, once in results.csv, once FINISHED with status ok in MLflow;
    no trial and no run left RUNNING; no finished run claims `status=ok` without being FINISHED. `tracked` (default:
    `cells`) are the cells the MLflow store must hold (a store deleted mid-run took the earlier cells' runs)."""
    tracked = cells if tracked is None else tracked
    ts = trials(out, suite, storage)
    complete = Counter(t.user_attrs["cell_id"] for t in ts if t.state == TrialState.COMPLETE)
    assert complete == Counter(cells), complete
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    csv = pd.read_csv(out / "results.csv")
    assert Counter(csv["cell_id"]) == Counter(cells), csv["cell_id"].tolist()
    client = MlflowClient(tracking_uri or f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(suite)
    runs = [r for r in client.search_runs([exp.experiment_id], max_results=1000) if r.data.tags.get("kind") !=
            "leaderboard"]
    ok = Counter(r.data.tags.get("cell_id") for r in runs if r.info.status == "FINISHED")
    assert ok == Counter(tracked), ok
    assert all(r.data.tags.get("status") == "ok" for r in runs if r.info.status == "FINISHED")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert not [r for r in runs if r.info.status != "FINISHED" and r.data.tags.get("status") == "ok"]
    finished_ids = {r.info.run_id for r in runs if r.info.status == "FINISHED"}
    assert {t.user_attrs["mlflow_run_id"] for t in ts if t.state == TrialState.COMPLETE
            and t.user_attrs["cell_id"] in tracked} == finished_ids
