"""Faults, third round: the MLflow tracking *server* goes away while `run --workers 2` trains two cells at once. No
worker stops or waits for it: every cell trains into the ledger, the run exits 0 with a warning per process at most,
and `normbench sync` fills the server in once it is back: every cell once, FINISHED, nothing left RUNNING."""

from __future__ import annotations

import pandas as pd
from optuna.trial import TrialState

from tests.faults.helpers import assert_invariants, finish, normbench, trials, wait_for
from tests.faults.test_tracking_outage import SLOW, server  # noqa: F401  (fixture)

LAYERS = ["layernorm", "layerscale", "rezero"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]


def test_an_mlflow_server_outage_under_two_workers_stops_no_worker_and_sync_fills_it_in(write_suite, tmp_path,
                                                                                        server):  # noqa: F811
    path = write_suite(train={**SLOW, "epochs": 8}, matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out, env = tmp_path / "out", {"MLFLOW_TRACKING_URI": server.url}
    proc = normbench("run", path, "--out", out, "--quiet", "--workers", "2", env=env)
    try:
        wait_for(lambda: [t.state for t in trials(out, "tiny")].count(TrialState.RUNNING) == 2, timeout=300,
                 step=0.1, what="both workers training a cell", alive=proc)
        server.stop()
        code, err = finish(proc, timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err  # every cell trained, into the ledger
    warned = [line for line in err.splitlines() if line.startswith("normbench: warning:")]
    assert 1 <= len(warned) <= 3 and all(server.url in w for w in warned), err  # each worker's, the end sync's
    assert "unreachable" not in err and "waiting" not in err, err  # never waited for
    assert sorted(pd.read_csv(out / "results.csv")["cell_id"]) == CELLS
    server.start()
    code, err = finish(normbench("sync", out, env=env))
    assert code == 0, err
    assert_invariants(out, "tiny", CELLS, tracking_uri=server.url)
