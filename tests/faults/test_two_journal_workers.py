"""Faults, third round: two `normbench worker` processes on one journal file (one output folder, no database), as
two shells or two jobs of a node would start them: they train side by side, each cell exactly once, both exit 0."""

from __future__ import annotations

from optuna.trial import TrialState

from tests.faults.helpers import assert_invariants, finish, normbench, trials, wait_for

LAYERS = ["layernorm", "layerscale", "rezero", "rmsnorm"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]


def test_two_workers_on_one_journal_train_every_cell_exactly_once(write_suite, tmp_path):
    path = write_suite(train={"epochs": 15, "batch_size": 64, "warmup_epochs": 0},
                       matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    workers = [normbench("worker", path, "--out", out, "--quiet") for _ in range(2)]
    try:
        wait_for(lambda: [t.state for t in trials(out, "tiny")].count(TrialState.RUNNING) == 2, timeout=300,
                 step=0.1, what="the two workers training side by side")
        ends = [finish(w, timeout=600) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [code for code, _ in ends] == [0, 0], ends
    pids = {t.user_attrs["worker_pid"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE}
    assert pids == {w.pid for w in workers}  # both trained
    assert finish(normbench("leaderboard", out))[0] == 0  # a worker writes no leaderboard; this one syncs MLflow
    assert_invariants(out, "tiny", CELLS)
