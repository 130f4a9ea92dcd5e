"""Fresh seeds report: the report stage's cells (pure), and a suite with report_seeds, targets and an epochs axis end
to end: it runs, its files carry roles, learning speed and histories, and a kill -9 in the report stage resumes
with nothing trained twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
from optuna.trial import TrialState

from normbench.contracts.suite import parse_suite
from normbench.store.ledger import Ledger
from normbench.sweep.report_stage import report_axes
from tests.conftest import REPO
from tests.faults.helpers import FAST_HEARTBEAT
from tests.sweep.test_runner import mlflow_runs


def suite(**extra):
    raw = {"name": "r", "dataset": {"name": "digits"}, "report_seeds": [100, 101],
           "matrix": {"depth": [6], "layer": ["layernorm", "rezero"], "lr": [1e-3, 3e-3], "seed": [0, 1]}, **extra}
    return parse_suite(raw, Path("r.yaml"))


def done(layer: str, lr: float, vals: list[float], test: float = 50.0) -> list:
    return [({"depth": 6, "layer": layer, "lr": lr, "seed": s}, {"status": "ok", "val_top1": v, "test_top1": test})
            for s, v in enumerate(vals)]


def test_report_cells_train_each_rows_val_chosen_lr_on_every_report_seed():
    # layernorm: val prefers 3e-3 (test would prefer 1e-3); rezero: 1e-3
    cells = [*done("layernorm", 1e-3, [60, 62], test=99.0), *done("layernorm", 3e-3, [70, 72], test=1.0),
             *done("rezero", 1e-3, [80, 80]), *done("rezero", 3e-3, [10, 10])]
    assert report_axes(suite(), cells) == [
        {"depth": 6, "layer": "layernorm", "lr": 3e-3, "seed": 100},
        {"depth": 6, "layer": "layernorm", "lr": 3e-3, "seed": 101},
        {"depth": 6, "layer": "rezero", "lr": 1e-3, "seed": 100},
        {"depth": 6, "layer": "rezero", "lr": 1e-3, "seed": 101}]


def test_without_a_seed_axis_report_cells_still_name_their_seed():
    one_seed = suite(matrix={"layer": ["layernorm"], "lr": [1e-3, 3e-3]})
    cells = [({"layer": "layernorm", "lr": lr}, {"status": "ok", "val_top1": v, "test_top1": 0.0})
             for lr, v in ((1e-3, 50.0), (3e-3, 40.0))]
    axes = report_axes(one_seed, cells)
    assert axes == [{"layer": "layernorm", "lr": 1e-3, "seed": 100}, {"layer": "layernorm", "lr": 1e-3, "seed": 101}]
    assert one_seed.cell(axes[0]).config.train.seed == 100


PROTOCOL = {"train": {"batch_size": 128, "warmup_epochs": 0, "telemetry_every": 0},
            "matrix": {"depth": [1], "epochs": [1, 3], "layer": ["layernorm", "layerscale", "rezero"],
                       "lr": [1e-3, 3e-3], "seed": [0]},
            "report_seeds": [100, 101], "targets": [15, 30],
            "sequential": {"max_seeds": 2},  # no claim rounds: tests/sweep/test_claim_rounds.py has them
            "claims": [{"layer": "layerscale", "beats": "layernorm", "depth": 1, "claimed": 3.4}]}


def test_a_suite_with_report_seeds_targets_and_a_budget_axis_end_to_end(write_suite, tmp_path):
    from normbench.cli import main

    path = write_suite(name="proto", **PROTOCOL)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    csv = pd.read_csv(out / "results.csv")
    select, report = csv[csv["role"] == "select"], csv[csv["role"] == "report"]
    assert len(select) == 12 and len(report) == 6 * 2 and set(report["seed"]) == {100, 101}
    assert {"steps_to_15", "steps_to_30"} <= set(csv)
    # every report cell sits at the lr its row's selection seed chose
    chosen = select.loc[select.groupby(["epochs", "layer"])["val_top1"].idxmax()].set_index(["epochs", "layer"])["lr"]
    assert all(chosen[(r.epochs, r.layer)] == r.lr for r in report.itertuples())
    history = pd.read_csv(out / "history.csv")
    assert len(history) == int(csv["epochs_run"].sum()) and set(history["cell_id"]) == set(csv["cell_id"])
    last_step = history.groupby("cell_id")["step"].max()
    assert (last_step == (csv.set_index("cell_id")["epochs_run"] * 8).loc[last_step.index]).all()  # 1077 // 128
    board = (out / "leaderboard.md").read_text()
    for text in ("report [100, 101] (fresh", "- regime: AdamW, 1 epochs = 8 optimizer steps", "rows converged",
                 "data ceiling (simple models", "## depth 1, 3 epochs: final accuracy",
                 "## depth 1, 3 epochs: learning speed", "steps to 30% val", "2 report", "p (Holm)",
                 "## does the ranking hold across budgets?", "permutation p", "lr sensitivity (points)", "failed",
                 "against a claimed +3.40", "| regime", "clipped to [0, 100]"):
        assert text in board, text
    for figure in ("accuracy_vs_step.png", "lr_sensitivity.png", "history.csv"):
        assert (out / figure).is_file(), figure
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0  # resumed: nothing left to train
    assert len(pd.read_csv(out / "results.csv")) == len(csv)


def test_budget_check_trains_each_chosen_lr_at_twice_the_epochs_on_two_report_seeds(write_suite, tmp_path):
    from normbench.cli import main

    path = write_suite(name="twice", train={"epochs": 2, "batch_size": 128, "warmup_epochs": 1, "telemetry_every": 0},
                       matrix={"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3, 3e-3], "seed": [0]},
                       report_seeds=[100, 101, 102], budget_check=True)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    csv = pd.read_csv(out / "results.csv")
    report, budget = csv[csv["role"] == "report"], csv[csv["role"] == "budget"]
    assert len(report) == 2 * 3 and len(budget) == 2 * 2 and set(budget["seed"]) == {100, 101}
    assert set(budget["epochs_run"]) == {4} and set(report["epochs_run"]) == {2}
    # at each row's chosen lr, the schedule stretched: warmup doubled with the epochs (its cell id says so)
    for r in budget.itertuples():
        assert r.lr == report[report["layer"] == r.layer]["lr"].iloc[0]
        assert "epochs=4" in r.cell_id and "warmup_epochs=2" in r.cell_id
    assert [t.state for t in _trials(out, "budget:twice")] == [TrialState.COMPLETE] * 4
    # the budget cells never score: the leaderboard's n per row is the report seeds'
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0  # resumed: nothing left to train
    assert len(pd.read_csv(out / "results.csv")) == len(csv)


def test_budget_check_needs_two_report_seeds_and_no_epochs_axis():
    import pytest

    from normbench.errors import SuiteError

    with pytest.raises(SuiteError, match="report_seeds"):
        parse_suite({"name": "r", "dataset": {"name": "digits"}, "budget_check": True,
                     "matrix": {"layer": ["layernorm"], "lr": [1e-3]}}, Path("r.yaml"))
    with pytest.raises(SuiteError, match="epochs"):
        suite(budget_check=True, matrix={"epochs": [1, 2], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]})
    with pytest.raises(SuiteError, match="true or false"):
        suite(budget_check="yes")


def _trials(out: Path, study: str, ledger: Ledger | None = None) -> list:
    """The study's trials, read without creating it (Ledger.study would: the runner must create its own stages)."""
    storage = (ledger or Ledger(None, out)).storage
    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


def test_a_kill_9_in_the_report_stage_resumes_with_nothing_trained_twice(write_suite, tmp_path):
    path = write_suite(name="rk", train={"epochs": 15, "batch_size": 64, "warmup_epochs": 0, "telemetry_every": 0},
                       matrix={"depth": [2], "layer": ["layernorm", "layerscale"], "lr": [1e-3, 3e-3], "seed": [0]},
                       report_seeds=[100, 101, 102])
    out = tmp_path / "out"
    command = [sys.executable, "-m", "normbench", "run", str(path), "--out", str(out), "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **FAST_HEARTBEAT}  # the killed cell is reclaimed in seconds
    proc = subprocess.Popen(command, cwd=REPO, env=env)
    deadline = time.monotonic() + 240
    ledger = None
    while time.monotonic() < deadline and proc.poll() is None:  # one report cell finished and one in flight
        time.sleep(0.2)
        try:
            ledger = ledger or Ledger(None, out) if (out / "ledger.journal").exists() else None
            states = [t.state for t in _trials(out, "report:rk", ledger)] if ledger else []
        except Exception:  # no ledger or no report stage yet
            continue
        if TrialState.COMPLETE in states and TrialState.RUNNING in states:
            break
    assert proc.poll() is None, "the run finished before the report stage could be interrupted"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert subprocess.run(command, cwd=REPO, env=env, timeout=300).returncode == 0
    for study, n in (("run:rk", 4), ("report:rk", 6)):
        complete = [t.user_attrs["cell_id"] for t in _trials(out, study) if t.state == TrialState.COMPLETE]
        assert len(complete) == len(set(complete)) == n, study
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 10 and csv["cell_id"].is_unique
    runs = mlflow_runs(out, "rk")
    finished = [r.data.tags["cell_id"] for r in runs if r.info.status == "FINISHED"]
    assert sorted(finished) == sorted(csv["cell_id"])
    assert {r.data.params.get("role") for r in runs if r.info.status == "FINISHED"} == {"select", "report"}
