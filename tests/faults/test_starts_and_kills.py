"""Concurrent and interrupted starts, a journal re-run under another host name, and SIGTERM."""

from __future__ import annotations

import os
import signal
import time

from optuna.trial import TrialState

from tests.faults.helpers import assert_invariants, finish, normbench, running, trials, wait_for

LAYERS = ["layernorm", "layerscale", "rezero"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]
SLOW = {"epochs": 15, "batch_size": 64, "warmup_epochs": 0}  # a few seconds a cell: time to kill it mid-cell


def test_three_runs_started_at_once_on_a_new_folder_all_work(write_suite, tmp_path):
    path, out = write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]}), tmp_path / "out"
    procs = [normbench("run", path, "--out", out, "--quiet") for _ in range(3)]
    assert [finish(p)[0] for p in procs] == [0, 0, 0]
    assert_invariants(out, "tiny", CELLS)


def test_a_kill_9_while_the_mlflow_store_is_created_does_not_brick_the_folder(write_suite, tmp_path):
    path, out = write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]}), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet")
    wait_for(lambda: any(out.glob(".mlflow.db.creating-*")), timeout=120, step=0.01, what="MLflow table creation")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "mlflow.db").exists()  # killed mid-creation: only the temporary store existed
    assert finish(normbench("run", path, "--out", out, "--quiet"))[0] == 0
    assert not list(out.glob(".mlflow.db.creating-*"))
    assert_invariants(out, "tiny", CELLS)


def test_a_journal_rerun_under_another_host_name_reclaims_the_dead_cell(write_suite, tmp_path):
    """A new container hostname (or a folder shared over NFS): the dead run's pid means nothing here; its free lock
    says it is dead."""
    path = write_suite(train=SLOW, matrix={"depth": [1], "layer": LAYERS[:2], "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    first = normbench("run", path, "--out", out, "--quiet", env={"NORMBENCH_HOST": "h1"})
    wait_for(lambda: running(out, "tiny"), what="a cell in flight", alive=first)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert TrialState.RUNNING in [t.state for t in trials(out, "tiny")]
    code, _ = finish(normbench("run", path, "--out", out, "--quiet", env={"NORMBENCH_HOST": "h2"}), timeout=180)
    assert code == 0
    assert_invariants(out, "tiny", CELLS[:2])


def test_sigterm_releases_the_cell_says_how_to_resume_and_the_rerun_finishes(write_suite, tmp_path):
    path = write_suite(train=SLOW, matrix={"depth": [1], "layer": LAYERS[:2], "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet")
    wait_for(lambda: running(out, "tiny"), what="a cell in flight", alive=proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, timeout=60)
    assert code == 143 and "Resume with the same command" in err  # 128 + SIGTERM, as a shell reports it
    states = [t.state for t in trials(out, "tiny")]
    assert TrialState.RUNNING not in states and TrialState.WAITING in states  # released, queued again
    assert finish(normbench("run", path, "--out", out, "--quiet"))[0] == 0
    assert_invariants(out, "tiny", CELLS[:2])


def test_sigterm_to_run_with_workers_releases_every_workers_cell(write_suite, tmp_path):
    path = write_suite(train=SLOW, matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet", "--workers", "2")
    wait_for(lambda: running(out, "tiny"), what="a cell in flight")
    proc.send_signal(signal.SIGTERM)  # to the parent only, as SLURM's scancel or a Kubernetes pod stop
    code, err = finish(proc, timeout=90)
    assert code == 143
    assert TrialState.RUNNING not in [t.state for t in trials(out, "tiny")]
    assert finish(normbench("run", path, "--out", out, "--quiet"))[0] == 0
    assert_invariants(out, "tiny", CELLS)
