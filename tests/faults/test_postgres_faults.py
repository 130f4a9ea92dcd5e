"""PostgreSQL stopped mid-run, a short blip, and a worker stalled past the heartbeat grace: every cell trained and
recorded exactly once, no worker dies on a refused connection. The server is the test session's own (loopback)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections import Counter

import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from normbench.cli import main
from normbench.store.attempts import ATTEMPTS
from tests.faults.helpers import FAST_HEARTBEAT, assert_invariants, finish, normbench, running, trials, wait_for
from tests.postgres_server import _connect, _find_binaries

pytestmark = pytest.mark.postgres

LAYERS = ["layernorm", "layerscale", "rezero"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]
SLOW = {"epochs": 15, "batch_size": 64, "warmup_epochs": 0}


class Postgres:
    """Stop and start the session's server in place (same data, same port)."""

    def __init__(self, url: str) -> None:
        u = make_url(url)
        conn = _connect(u.port, u.password)
        with conn.cursor() as cur:
            cur.execute("SHOW data_directory")
            self.datadir = cur.fetchone()[0]
        conn.close()
        self.port, self.tmp = u.port, os.path.dirname(self.datadir)
        self.pg_ctl = _find_binaries()[1]
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _ctl(self, *args: str) -> None:
        subprocess.run([*self.as_user, self.pg_ctl, *args, "-D", self.datadir], cwd=self.tmp, check=True,
                       capture_output=True)

    def stop(self) -> None:
        self._ctl("stop", "-w", "-m", "fast")

    def start(self) -> None:
        self._ctl("start", "-w", "-l", os.path.join(self.tmp, "server.log"), "-o", f"-p {self.port}")


@pytest.fixture
def own_database(postgres_url):
    """A new database, dropped after the test over a new connection (the server restarts in between, so the shared
    `fresh_postgres_url` fixture's connection would be gone)."""
    u = make_url(postgres_url)
    name = f"normbench_{uuid.uuid4().hex[:12]}"

    def execute(sql: str) -> None:
        conn = _connect(u.port, u.password)
        conn.autocommit = True
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute(sql)

    execute(f"CREATE DATABASE {name}")
    yield u.set(database=name).render_as_string(hide_password=False)
    execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _workers(path, out, url, n=2, env=None):
    return [normbench("worker", path, "--out", out, "--storage", url, "--quiet", env=env) for _ in range(n)]


def _both_started(out, url) -> None:
    """Both workers past their start, one mid-cell: a worker that starts while the server is down exits 3 by design
    (tests/tracking/test_unreachable_servers.py), which is not the outage these tests stage."""
    def ready() -> bool:
        ts = trials(out, "tiny", url)
        pids = {t.user_attrs["worker_pid"] for t in ts if "worker_pid" in t.user_attrs}
        return len(pids) == 2 and any(t.state == TrialState.RUNNING for t in ts)
    wait_for(ready, what="both workers' first claims and a cell in flight")


def _leaderboard(out, url) -> None:
    assert main(["leaderboard", str(out), "--storage", url]) == 0


def test_postgres_stopped_10_s_mid_run_is_waited_out_by_two_workers(write_suite, tmp_path, own_database,
                                                                    postgres_url):
    fresh_postgres_url = own_database
    path, out = write_suite(train=SLOW, matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]}), tmp_path
    server = Postgres(postgres_url)
    procs = _workers(path, out / "o", fresh_postgres_url)
    _both_started(out / "o", fresh_postgres_url)
    server.stop()
    try:
        time.sleep(10)
    finally:
        server.start()
    results = [finish(p) for p in procs]
    assert [code for code, _ in results] == [0, 0], results
    assert any("is unreachable" in err and "***" in err for _, err in results)  # said, password masked
    _leaderboard(out / "o", fresh_postgres_url)
    assert_invariants(out / "o", "tiny", CELLS, storage=fresh_postgres_url)


def test_a_3_s_blip_trains_no_cell_twice(write_suite, tmp_path, own_database, postgres_url):
    fresh_postgres_url = own_database
    path = write_suite(train=SLOW, matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "o"
    server = Postgres(postgres_url)
    env = {"NORMBENCH_HEARTBEAT_INTERVAL": "1", "NORMBENCH_HEARTBEAT_GRACE": "10"}
    procs = _workers(path, out, fresh_postgres_url, env=env)
    _both_started(out, fresh_postgres_url)
    server.stop()
    time.sleep(3)
    server.start()
    assert [finish(p)[0] for p in procs] == [0, 0]
    _leaderboard(out, fresh_postgres_url)
    assert_invariants(out, "tiny", CELLS, storage=fresh_postgres_url)
    ts = trials(out, "tiny", fresh_postgres_url)
    # No cell's training was cut short and retried: a trial that failed never trained an epoch (none reported).
    # A claim whose answer the blip lost is such a trial (its replay reads "taken"); the ledger frees it without
    # counting an attempt (store/ledger.py `claim`), so a FAIL record may stay, but no cell carries a lost attempt.
    started_then_failed = [(t.number, t.user_attrs) for t in ts
                           if t.state == TrialState.FAIL and t.intermediate_values]
    assert not started_then_failed
    assert not [t.number for t in ts if t.state == TrialState.COMPLETE and t.user_attrs.get(ATTEMPTS)]
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], "tags.cell_id != ''")
    assert Counter(r.data.tags["cell_id"] for r in runs) == Counter(CELLS)  # one MLflow run a cell: trained once


def epoch_logged(out) -> bool:
    """Whether a run in the output folder's MLflow store has its first epoch's metrics."""
    if not (out / "mlflow.db").exists():  # opening a missing store would create it, racing the worker
        return False
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    return exp is not None and any("train_loss" in r.data.metrics
                                   for r in client.search_runs([exp.experiment_id], max_results=10))


def test_a_worker_stalled_past_the_grace_stops_its_cell_and_exits_cleanly(write_suite, tmp_path, fresh_postgres_url):
    path = write_suite(train={**SLOW, "epochs": 25},
                       matrix={"depth": [1], "layer": LAYERS[:2], "lr": [1e-3], "seed": [0]})
    out = tmp_path / "o"
    a = normbench("worker", path, "--out", out, "--storage", fresh_postgres_url, "--quiet",
                  env={**FAST_HEARTBEAT, "NORMBENCH_HOST": "node-a"})
    # stop a while it trains, just after its first epoch reached MLflow (the next write is >= 5 s away): stopped
    # inside a write, it would hold the lock of the SQLite MLflow store the two "nodes" share here (real nodes
    # share an MLflow server), and b could not open that store at all; a stall of the ledger is what is tested
    wait_for(lambda: running(out, "tiny", fresh_postgres_url) and epoch_logged(out), what="worker a's first epoch")
    os.kill(a.pid, signal.SIGSTOP)  # a stalls: no heartbeat; b takes its cell over after the grace
    b = normbench("worker", path, "--out", out, "--storage", fresh_postgres_url, "--quiet",
                  env={**FAST_HEARTBEAT, "NORMBENCH_HOST": "node-b"})
    try:
        try:
            wait_for(lambda: any(t.state == TrialState.FAIL for t in trials(out, "tiny", fresh_postgres_url)),
                     timeout=100, what="b to fail a's stale trial")
        except AssertionError:
            print([(t.number, t.state, t.user_attrs.get("worker_host"))
                   for t in trials(out, "tiny", fresh_postgres_url)])  # for the CI log
            b.send_signal(signal.SIGINT)
            print("worker b:", b.communicate(timeout=60))
            raise
        time.sleep(1)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    code_a, err_a = finish(a)
    code_b, _ = finish(b)
    assert (code_a, code_b) == (0, 0), err_a
    _leaderboard(out, fresh_postgres_url)
    assert_invariants(out, "tiny", CELLS[:2], storage=fresh_postgres_url)
