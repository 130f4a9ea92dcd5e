"""The MLflow tracking server stopped mid-cell is no outage of the run: every cell trains into the ledger and the run
exits 0 with one warning. Back before the run ends, the run's own sync fills MLflow in; back later, `normbench sync`
does. Either way every cell is in MLflow once, FINISHED, nothing left RUNNING."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.faults.helpers import assert_invariants, finish, free_port, normbench, running, wait_for

CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in ("layernorm", "layerscale")]
MATRIX = {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3], "seed": [0]}
SLOW = {"epochs": 15, "batch_size": 64, "warmup_epochs": 0}


class MlflowServer:
    """`mlflow server` on loopback, stoppable and restartable on the same port and store."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{self.folder / 'server.db'}",
             "--artifacts-destination", str(self.folder / "artifacts")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(self._up, timeout=120, step=0.3, what="mlflow server")

    def _up(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
            return r.status == 200

    def stop(self) -> None:
        import os
        import signal

        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its uvicorn worker, at once
            self.proc.wait()
            self.proc = None


@pytest.fixture
def server(tmp_path):
    s = MlflowServer(tmp_path)
    s.start()
    yield s
    s.stop()


def _live_epoch(url: str) -> bool:
    """A run still RUNNING on the server with an epoch logged."""
    client = MlflowClient(url)
    experiment = client.get_experiment_by_name("tiny")
    return experiment is not None and any(
        "train_loss" in r.data.metrics
        for r in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'"))


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("normbench: warning:")]


def test_a_tracking_server_restart_mid_cell_costs_one_warning_and_the_runs_sync_repairs_it(write_suite, tmp_path,
                                                                                          server):
    # cells long enough that the run outlives the server's restart (a minute on a loaded machine)
    path, out = write_suite(train={**SLOW, "epochs": 300}, matrix=MATRIX), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet", env={"MLFLOW_TRACKING_URI": server.url})
    wait_for(lambda: running(out, "tiny") and _live_epoch(server.url), what="a cell in flight, logged live")
    server.stop()  # its live run is cut short: the run's sync must complete it, not add a second one
    time.sleep(4)
    server.start()
    assert proc.poll() is None, "the run ended before the server was back: make its cells longer"
    code, err = finish(proc, timeout=900)
    assert code == 0, err
    assert len(_warnings(err)) <= 1 and "unreachable" not in err  # never waited for; said at most once
    assert_invariants(out, "tiny", CELLS, tracking_uri=server.url)  # the run's own sync, at its end


def test_a_server_down_for_the_rest_of_the_run_stops_nothing_and_the_next_sync_shows_every_cell(write_suite,
                                                                                             tmp_path, server):
    path, out = write_suite(train=SLOW, matrix=MATRIX), tmp_path / "out"
    env = {"MLFLOW_TRACKING_URI": server.url}
    proc = normbench("run", path, "--out", out, "--quiet", env=env)
    wait_for(lambda: running(out, "tiny"), what="a cell in flight")
    server.stop()
    code, err = finish(proc)
    assert code == 0, err  # every cell trained, into the ledger
    warned = _warnings(err)
    assert len(warned) == 2 and all(server.url in w for w in warned), err  # live logging's, then the end sync's
    assert sorted(pd.read_csv(out / "results.csv")["cell_id"]) == CELLS
    server.start()
    code, err = finish(normbench("sync", out, env=env))
    assert code == 0 and "Traceback" not in err, err
    assert_invariants(out, "tiny", CELLS, tracking_uri=server.url)
