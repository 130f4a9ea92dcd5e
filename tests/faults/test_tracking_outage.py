"""The MLflow tracking server stopped mid-cell: waited for, and nothing trained is dropped; past
NORMBENCH_RETRY_SECONDS the run exits 3 naming the URL, and the next run (server back) finishes every cell once."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

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


def test_a_tracking_server_restart_mid_cell_is_waited_out(write_suite, tmp_path, server):
    path, out = write_suite(train=SLOW, matrix=MATRIX), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet", env={"MLFLOW_TRACKING_URI": server.url})
    wait_for(lambda: running(out, "tiny"), what="a cell in flight")
    server.stop()
    time.sleep(4)
    server.start()
    code, err = finish(proc)
    assert code == 0, err
    assert f"the MLflow tracking store {server.url} is unreachable" in err  # said once, while it waited
    assert_invariants(out, "tiny", CELLS, tracking_uri=server.url)


def test_past_the_retry_budget_exit_3_then_the_next_run_finishes_every_cell_once(write_suite, tmp_path, server):
    path, out = write_suite(train=SLOW, matrix=MATRIX), tmp_path / "out"
    env = {"MLFLOW_TRACKING_URI": server.url, "NORMBENCH_RETRY_SECONDS": "3"}
    proc = normbench("run", path, "--out", out, "--quiet", env=env)
    wait_for(lambda: running(out, "tiny"), what="a cell in flight")
    server.stop()
    code, err = finish(proc)
    assert code == 3 and server.url in err and "unreachable" in err
    server.start()
    code, err = finish(normbench("run", path, "--out", out, "--quiet", env=env))
    assert code == 0, err
    assert_invariants(out, "tiny", CELLS, tracking_uri=server.url)
    assert not list((out / "mlflow-spool").glob("*.json"))  # a spooled summary was replayed, not left behind
