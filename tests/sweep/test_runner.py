"""`normbench run` end to end: every cell once in the ledger, results.csv and MLflow; resumable; divergence is a
result; the MLflow UI serves the runs."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.names import OutputFolder
from normbench.store.ledger import Ledger
from tests.conftest import REPO

LAYERS = ["layernorm", "rmsnorm", "learnable_scaler", "layerscale", "rezero", "fixup"]


def mlflow_runs(out: Path, experiment: str) -> list:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return [r for r in runs if r.data.tags.get("kind") != "leaderboard"]


def ledger_cells(out: Path, name: str) -> list:
    return Ledger(None, out).study(f"run:{name}").get_trials(deepcopy=False)


def assert_each_cell_once(out: Path, name: str, n_cells: int) -> None:
    trials = ledger_cells(out, name)
    complete = [t.user_attrs["cell_id"] for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == len(set(complete)) == n_cells
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    csv = pd.read_csv(out / "results.csv")
    assert sorted(csv["cell_id"]) == sorted(complete)
    runs = mlflow_runs(out, name)
    finished = [r.data.tags["cell_id"] for r in runs if r.info.status == "FINISHED"]
    assert sorted(finished) == sorted(complete)
    assert not [r for r in runs if r.info.status == "RUNNING"]


def test_run_writes_leaderboard_csv_and_one_mlflow_run_per_cell(write_suite, tmp_path):
    path = write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    board = (out / "leaderboard.md").read_text()
    for layer in LAYERS:
        assert f"| {layer} " in board
    assert (out / "accuracy_vs_depth.png").stat().st_size > 0 and (out / "accuracy_vs_lr.png").exists()
    files = [p.name for p in out.iterdir() if p.is_file()]
    assert any(name.startswith("telemetry_") for name in files)  # the patterns below are exercised
    assert not [name for name in files if not OutputFolder.writes(name)]  # every file written is declared
    assert_each_cell_once(out, "tiny", len(LAYERS))
    run = mlflow_runs(out, "tiny")[0]
    assert {"depth", "layer", "lr", "seed", "train.epochs", "model.embed_dim"} <= set(run.data.params)
    assert {"best_val_top1", "diverged", "val_top1", "train_loss", "scheduled_lr", "grad_norm"} <= set(run.data.metrics)
    assert {"suite", "cell_id", "status", "torch_version", "timm_version", "device"} <= set(run.data.tags)

    # the same command again trains nothing
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert len(mlflow_runs(out, "tiny")) == len(LAYERS)
    # and the leaderboard regenerates from the ledger alone
    (out / "leaderboard.md").unlink()
    assert main(["leaderboard", str(out)]) == 0 and "rezero" in (out / "leaderboard.md").read_text()


def test_lr_50_diverges_is_recorded_and_exits_0(write_suite, tmp_path):
    path = write_suite(name="boom", train={"epochs": 2, "batch_size": 64, "warmup_epochs": 0, "clip_grad": None},
                       matrix={"depth": [2], "layer": ["layernorm", "rezero"], "lr": [50.0], "seed": [0]})
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    csv = pd.read_csv(out / "results.csv")
    assert set(csv["status"]) == {"diverged"}
    board = (out / "leaderboard.md").read_text()
    assert "1/1" in board and "layernorm" in board
    assert {r.data.metrics["diverged"] for r in mlflow_runs(out, "boom")} == {1.0}


def test_changed_recipe_refuses_to_resume(write_suite, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(write_suite(matrix={"depth": [1], "layer": "layernorm"})), "--out", str(out),
                 "--quiet"]) == 0
    changed = write_suite(matrix={"depth": [1], "layer": "layernorm"}, train={"epochs": 2})
    assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 2
    assert "changed since the cells in this ledger" in capsys.readouterr().err


def test_growing_the_matrix_runs_only_the_new_cells(write_suite, tmp_path):
    out = tmp_path / "out"
    first = {"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}
    assert main(["run", str(write_suite(matrix=first)), "--out", str(out), "--quiet"]) == 0
    grown = {"depth": [1, 2], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0, 1]}  # every axis grows
    assert main(["run", str(write_suite(matrix=grown)), "--out", str(out), "--quiet"]) == 0
    assert_each_cell_once(out, "tiny", 8)
    assert len(mlflow_runs(out, "tiny")) == 8  # the first cell was not trained again


def test_dry_run_lists_the_bracket_cells_run_and_the_next_round(write_suite, tmp_path, capsys):
    # two lrs: the best is at an edge whatever it is, so the next round has one cell per seed
    path = write_suite(name="dry", matrix={"depth": [1], "layer": ["layernorm"], "lr": [3e-4, 1e-3], "seed": [0]},
                       bracket_max_steps=1)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--bracket", "--dry-run"]) == 0
    listed = capsys.readouterr().out
    coming = [line.split()[0] for line in listed.splitlines() if "to run (next bracket round)" in line]
    # one cell per side that bracketing extends: the edge the best sits on, or both ways for a row at chance
    n = len(coming)
    assert n in (1, 2) and f"{2 + n} cells, 2 finished" in listed and "bracket_max_steps=1 per end" in listed
    assert main(["run", str(path), "--out", str(out), "--quiet", "--bracket"]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--bracket", "--dry-run"]) == 0
    listed = capsys.readouterr().out
    assert any(line.startswith(coming[0]) and "(bracket round 1)" in line for line in listed.splitlines())
    assert "next bracket round" not in listed and f"{2 + n} cells, {2 + n} finished" in listed  # the cap is reached


def _normbench(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "normbench", *args], cwd=REPO, **kwargs)


def test_kill_9_mid_suite_then_resume_runs_every_cell_exactly_once(write_suite, tmp_path):
    layers = ["layernorm", "layerscale", "rezero"]  # once stopped: one cell finished, one in flight, one never begun
    # 20 epochs (~1.3 s a cell at depth 2 on one core): once a cell's first epoch is in the ledger it has 19 to go,
    # while the wait below looks every 0.05 s and stops the run (SIGSTOP) the moment it sees one; it fails at once
    # if the run ends first (at 3 epochs and 0.5 s between looks an idle CI box finished all four cells unseen)
    path = write_suite(name="crash", train={"epochs": 20, "batch_size": 64, "warmup_epochs": 0},
                       matrix={"depth": [2], "layer": layers, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    # one thread, as a worker of `run --workers` gets: two threads of a tiny model thrash a busy 2-core machine
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = _normbench("run", str(path), "--out", str(out), "--quiet", env=one_thread)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for one finished cell and one in flight
        time.sleep(0.05)
        assert proc.poll() is None, "the run ended before a cell was caught in flight"
        if not (out / "ledger.journal").exists():
            continue
        cells = ledger_cells(out, "crash")
        states = [t.state for t in cells]
        # mid-cell: an epoch reported (its FAIL record then gets a FAILED MLflow run from the sync: tracking/sync.py)
        if TrialState.COMPLETE in states and any(t.state == TrialState.RUNNING and t.intermediate_values
                                                 for t in cells):
            os.kill(proc.pid, signal.SIGSTOP)  # frozen where it was seen: it cannot finish the cell before the kill
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cells = ledger_cells(out, "crash")
    states = [t.state for t in cells]
    assert TrialState.RUNNING in states and states.count(TrialState.COMPLETE) < len(layers)
    assert [len(t.intermediate_values) for t in cells if t.state == TrialState.RUNNING][0] < 20  # killed mid-cell
    assert _normbench("run", str(path), "--out", str(out), "--quiet", env=one_thread).wait(timeout=300) == 0
    assert_each_cell_once(out, "crash", len(layers))
    runs = mlflow_runs(out, "crash")
    assert [r.info.status for r in runs].count("FAILED") == 1  # the cut-off cell's first run, closed as failed


def test_two_local_workers_run_every_cell_exactly_once(write_suite, tmp_path):
    layers = ["layernorm", "layerscale", "rezero", "rmsnorm", "dyt", "fixup"]
    # cells of ~1.3 s each (20 epochs): with sub-second cells the first worker to finish importing torch can take
    # all six before the second one has started
    path = write_suite(name="pair", train={"epochs": 20, "batch_size": 64, "warmup_epochs": 0},
                       matrix={"depth": [2], "layer": layers, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    assert _normbench("run", str(path), "--out", str(out), "--workers", "2", "--quiet").wait(timeout=300) == 0
    assert_each_cell_once(out, "pair", len(layers))
    pids = {t.user_attrs["worker_pid"] for t in ledger_cells(out, "pair") if t.state == TrialState.COMPLETE}
    assert len(pids) == 2  # both workers took cells


def test_parent_of_local_workers_counts_the_bracketing_rounds_they_queue(write_suite, tmp_path):
    # two lrs, one step allowed: 2 matrix cells, then 1 bracket cell that a worker queues
    path = write_suite(name="wbr", matrix={"depth": [1], "layer": ["layernorm"], "lr": [3e-4, 1e-3], "seed": [0]},
                       bracket_max_steps=1)
    out = tmp_path / "out"
    proc = _normbench("run", str(path), "--out", str(out), "--workers", "2", "--bracket", stderr=subprocess.PIPE,
                      text=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    # the best's edge, or both ways for a row at chance; noted in parts when the watch saw the round half queued
    queued = sum(int(k) for k in re.findall(r"bracket round 1: (\d+) cells \(lrs beyond", err))
    assert queued in (1, 2), err
    n = 2 + queued
    counts = [(int(d), int(t)) for d, t in re.findall(r"^\[(\d+)/(\d+)\] depth=", err, flags=re.M)]
    # the round's cells counted; on a failure, every trial says where a second copy of a cell came from
    assert counts[-1] == (n, n) and all(done <= total for done, total in counts), f"{err}\n{ledger_story(out)}"


def ledger_story(out: Path) -> str:
    """Every trial of the folder's ledger: study, number, state, cell, worker pid, copy of which, its other attrs."""
    ledger = Ledger(None, out)
    return "\n".join(
        f"{name} #{t.number} {t.state.name} {t.user_attrs.get('cell_id')} pid={t.user_attrs.get('worker_pid')} "
        f"copy_of={t.system_attrs.get('retry_history')} attrs={sorted(k for k in t.user_attrs if k != 'history')}"
        for name in ledger.study_names() for t in ledger.study(name).get_trials(deepcopy=False))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_suite_runs_over_mlflow_rest_api(write_suite, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 0
    port = _free_port()
    ui = _normbench("ui", str(out), "--port", str(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        deadline, body = time.monotonic() + 90, None
        while time.monotonic() < deadline and body is None:
            try:
                with urllib.request.urlopen(f"{base}/experiments/get-by-name?experiment_name=tiny", timeout=5) as r:
                    body = json.load(r)
            except OSError:
                time.sleep(1)
        assert body is not None, "the MLflow UI did not come up"
        request = urllib.request.Request(
            f"{base}/runs/search", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"experiment_ids": [body["experiment"]["experiment_id"]],
                             "filter": "attributes.status = 'FINISHED'"}).encode())
        with urllib.request.urlopen(request, timeout=10) as r:
            runs = json.load(r)["runs"]
        cells = {run["info"]["run_name"] for run in runs if run["info"]["run_name"] != "leaderboard"}
        assert cells == {"d1 layernorm lr1e-3 s0", "d1 layerscale lr1e-3 s0"}  # tracking/run_record.py run_name
    finally:  # SIGTERM: a test run started in the background (`cmd &`) hands its children SIGINT ignored
        ui.send_signal(signal.SIGTERM)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            ui.kill()


def test_bracket_adds_lrs_beyond_the_edge_once_and_resumes(write_suite, tmp_path):
    # a grid far below the optimum of a 32-step run: the best lr is the top of the grid, so rounds step up by 3.333
    path = write_suite(name="brk", train={"epochs": 2, "batch_size": 64, "warmup_epochs": 0},
                       matrix={"depth": [1], "layer": ["layernorm"], "lr": [3e-4, 1e-3], "seed": [0]},
                       bracket_max_steps=2)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--bracket"]) == 0
    ledger = Ledger(None, out)
    rounds = sorted(n for n in ledger.study_names() if n.startswith("bracket:brk:"))
    assert rounds and rounds[0] == "bracket:brk:1"
    csv = pd.read_csv(out / "results.csv")
    assert 3.333e-3 in set(csv["lr"]) and csv["cell_id"].is_unique
    beyond = sorted(lr for lr in csv["lr"] if lr > 1e-3)
    assert beyond == [3.333e-3, 1.111e-2][:len(beyond)] and len(beyond) == len(rounds)
    by_lr = csv.groupby("lr")["val_top1"].mean()
    board = (out / "leaderboard.md").read_text()
    if by_lr.idxmax() == max(by_lr.index):  # still climbing: only the step limit stops it, and the table says so
        assert len(beyond) == 2 and "edge (highest lr)" in board
    else:
        assert "edge (" not in board
    runs = mlflow_runs(out, "brk")
    assert {r.data.params["data.train_size"] for r in runs} == {"1077"}  # the true split size, not a default
    # resuming trains nothing and adds no round
    assert main(["run", str(path), "--out", str(out), "--quiet", "--bracket"]) == 0
    assert len(mlflow_runs(out, "brk")) == len(csv)
    assert sorted(n for n in ledger.study_names() if n.startswith("bracket:brk:")) == rounds


def test_a_suite_resumed_with_more_seeds_gives_every_lr_its_rounds_tried_the_new_seeds(write_suite, tmp_path):
    """The modern sweep went from 2 selection seeds to 4: lrs its 2-seed rounds added must get seeds 2 and 3 too, or
    lr means (and the claims that pair seeds) would compare different seeds."""
    train = {"epochs": 2, "batch_size": 64, "warmup_epochs": 0}
    matrix = {"depth": [1], "layer": ["layernorm"], "lr": [3e-4, 1e-3], "seed": [0]}
    out = tmp_path / "out"
    first = write_suite(name="grow", train=train, matrix=matrix, bracket_max_steps=1)
    assert main(["run", str(first), "--out", str(out), "--quiet", "--bracket"]) == 0
    lrs = set(pd.read_csv(out / "results.csv")["lr"])
    assert len(lrs) == 3  # one round beyond an edge
    grown = write_suite(name="grow", train=train, matrix={**matrix, "seed": [0, 1]}, bracket_max_steps=1)
    assert main(["run", str(grown), "--out", str(out), "--quiet", "--bracket"]) == 0
    csv = pd.read_csv(out / "results.csv")
    selection = csv[csv["role"] == "select"]
    assert set(selection["lr"]) == lrs  # the cap holds: no new lr, only the seeds the earlier round lacked
    assert selection.groupby("lr")["seed"].apply(sorted).map(tuple).to_dict() == {lr: (0, 1) for lr in lrs}
    assert csv["cell_id"].is_unique
