"""The answer lost after the server committed (a timeout, a reset, a proxy's 502): the retry must not write twice.
Loopback proxies in front of PostgreSQL and `mlflow server` forward each request, let the server commit it, then
close the connection before the client reads the answer: queueing a cell, finishing one, opening its MLflow run
(and the suite's parent run) and logging its epochs. Each write is there once: one trial per cell; and after the
run's sync, one MLflow run per cell and one metric point per step."""

from __future__ import annotations

from collections import Counter

import pytest
from mlflow.tracking import MlflowClient
from sqlalchemy.engine import make_url

from tests.faults.dropping_proxy import Drop, DroppingProxy, HttpFramer, PostgresFramer
from tests.faults.helpers import assert_invariants, finish, normbench, trials
from tests.faults.test_tracking_outage import MlflowServer

pytestmark = pytest.mark.postgres

CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in ("layernorm", "layerscale")]
EPOCHS = 2

DB_DROPS = [Drop("queue a cell", lambda tx: b"INSERT INTO trials " in tx and b"normbench_key" in tx),
            Drop("finish a cell", lambda tx: b"SET state='COMPLETE'" in tx)]
# MLflow is a view of the ledger: a lost answer may leave a duplicate or a gap there, which the run's closing sync
# (normbench/tracking/sync.py) repairs, so the store ends with each run and each point once all the same
HTTP_DROPS = [Drop("create a run", lambda r: b" /api/2.0/mlflow/runs/create " in r, times=2),  # parent, first cell
              Drop("log epochs", lambda r: b" /api/2.0/mlflow/runs/log-batch " in r and b'"val_top1"' in r)]
STEPS_PER_EPOCH = 1077 // 256  # digits' train split, batch 256: val_top1 is logged at step = optimizer steps


@pytest.fixture
def server(tmp_path):
    s = MlflowServer(tmp_path)
    s.start()
    yield s
    s.stop()


def test_answers_lost_after_the_commit_leave_each_write_once(write_suite, tmp_path, fresh_postgres_url, server):
    path, out = write_suite(train={"epochs": EPOCHS, "batch_size": 256, "warmup_epochs": 0}), tmp_path / "out"
    db = make_url(fresh_postgres_url)
    with (DroppingProxy(db.port, PostgresFramer, DB_DROPS) as db_proxy,
          DroppingProxy(server.port, HttpFramer, HTTP_DROPS) as http_proxy):
        storage = db.set(port=db_proxy.port).render_as_string(hide_password=False)
        tracking = f"http://127.0.0.1:{http_proxy.port}"
        code, err = finish(normbench("run", path, "--out", out, "--storage", storage, "--quiet",
                                     env={"MLFLOW_TRACKING_URI": tracking, "NORMBENCH_RETRY_SECONDS": "60"}))
    assert code == 0, err
    # every answer meant to be lost was (else this test shows nothing)
    assert db_proxy.dropped == {d.name: d.times for d in DB_DROPS}, db_proxy.dropped
    assert http_proxy.dropped == {d.name: d.times for d in HTTP_DROPS}, http_proxy.dropped

    # what a lost answer left in MLflow (a duplicate, a gap, an unclosed run) the next sync repairs from the ledger
    code, err = finish(normbench("sync", out, "--storage", fresh_postgres_url, "--tracking-uri", server.url))
    assert code == 0, err
    assert_invariants(out, "tiny", CELLS, storage=fresh_postgres_url, tracking_uri=server.url)
    ledger = trials(out, "tiny", fresh_postgres_url)
    assert Counter(t.user_attrs["cell_id"] for t in ledger) == Counter(CELLS), [
        (t.number, t.state, t.user_attrs.get("cell_id"), t.system_attrs) for t in ledger]
    client = MlflowClient(server.url)
    experiment = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([experiment], max_results=100)
    assert Counter(r.data.tags.get("cell_id", r.data.tags.get("kind")) for r in runs) == Counter(
        [*CELLS, "leaderboard"])
    for run in runs:
        if run.data.tags.get("kind") == "leaderboard":
            continue
        for key in ("val_top1", "train_loss"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            expected = [STEPS_PER_EPOCH * (epoch + 1) for epoch in range(EPOCHS)]
            assert sorted(steps) == expected, (run.data.tags["cell_id"], key, steps)
