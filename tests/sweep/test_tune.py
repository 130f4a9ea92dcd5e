"""`normbench tune`: the search trains on a seed no re-run uses, and the re-runs are reported by test top-1."""

from __future__ import annotations

import math

import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from normbench.cli import main
from normbench.contracts.selection import chosen_lrs
from normbench.contracts.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep.tune import LABEL, best_trial, search_seed, seeds
from tests.sweep.test_runner import mlflow_runs


def test_search_and_reruns_use_disjoint_seeds(write_suite, tmp_path):
    path = write_suite(name="tn", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0, 1]},
                       tune={"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    suite = load_suite(path)
    assert seeds(suite) == [0, 1] and search_seed(suite) == 2
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out), "--quiet"]) == 0
    tuned = Ledger(None, out).study("tuned:tn").get_trials(deepcopy=False)
    assert {t.user_attrs["axes"]["seed"] for t in tuned} == {0, 1}
    runs = mlflow_runs(out, "tn")
    search = [r for r in runs if "trial=" in r.data.tags["cell_id"]]
    assert len(search) == 2 and {r.data.params["seed"] for r in search} == {"2"}  # never a re-run seed
    assert sorted(r.data.params["seed"] for r in runs if r not in search) == ["0", "1"]
    board = (out / "leaderboard.md").read_text()
    assert "re-run on seeds the search did not train on" in board and "| layernorm " in board
    row = next(line for line in board.split("## tuned", 1)[1].splitlines() if line.startswith("| layernorm "))
    assert "test top-1" in board and "[" in row  # two seeds: a CI
    assert pd.notna(tuned[0].user_attrs["result"]["test_top1"])


def test_changed_recipe_refuses_to_resume_a_tune_and_leaves_its_folder_alone(write_suite, tmp_path, capsys):
    tune = {"trials": 1, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}
    matrix = {"depth": [1], "layer": ["layernorm"], "seed": [0]}
    out = tmp_path / "out"
    assert main(["tune", str(write_suite(name="tr", matrix=matrix, tune=tune)), "--out", str(out), "--quiet"]) == 0
    saved, journal = (out / "suite.yaml").read_text(), (out / "ledger.journal").read_bytes()
    changed = write_suite(name="tr", matrix=matrix, tune=tune, train={"epochs": 2})
    assert main(["tune", str(changed), "--out", str(out), "--quiet"]) == 2
    assert "changed since the cells in this ledger" in capsys.readouterr().err
    assert (out / "suite.yaml").read_text() == saved  # `normbench leaderboard OUT` still reads the recipe trained
    assert (out / "ledger.journal").read_bytes() == journal


def test_tune_alone_writes_results_tables_and_figures_and_its_lines_show_the_sampled_lr(write_suite, tmp_path,
                                                                                          capsys):
    path = write_suite(name="ta", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0, 1]},
                       tune={"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    out = tmp_path / "out"
    assert main(["tune", str(path), "--out", str(out)]) == 0
    lines = capsys.readouterr().err.splitlines()
    searched = Ledger(None, out).study("tune:ta:depth=1,layer=layernorm").get_trials(deepcopy=False)
    for t in searched:  # `[1/4] depth=1,layer=layernorm,lr=0.00354,trial=0  ok  val 27.8%  ...`
        label = f"depth=1,layer=layernorm,lr={t.params['lr']:.3g},trial={t.number}"
        assert any(f"{label}  ok  val " in line for line in lines), lines
        assert t.user_attrs[LABEL] == label  # what the parent of `--workers` prints for it

    cells = pd.read_csv(out / "results.csv")  # was not written: `tune` alone has no run cells
    search, reruns = cells[cells["role"] == "select"], cells[cells["role"] == "report"]
    assert sorted(search["lr"]) == sorted(t.params["lr"] for t in searched) and set(search["seed"]) == {2}
    best = max(searched, key=lambda t: (t.value, -t.params["lr"]))
    assert sorted(reruns["seed"]) == [0, 1] and set(reruns["lr"]) == {best.params["lr"]}
    assert (out / "history.csv").is_file() and (out / "accuracy_vs_lr.png").stat().st_size > 0
    board = (out / "leaderboard.md").read_text()
    assert "No finished cells yet" not in board
    row = next(line for line in board.splitlines() if line.startswith("| 1") and "| layernorm " in line)
    assert "| 2 report " in row  # the selection picked tune's lr, so the two re-runs on fresh seeds score it


def test_tune_exits_1_and_names_the_cells_failed_for_good_like_run(monkeypatch, capsys):
    from normbench.sweep import suite_run
    from normbench.sweep.worker import WorkSummary

    lost = WorkSummary(cells_run=3, failed_for_good={"depth=1,layer=poison_norm,lr=0.001,seed=0": 3})
    monkeypatch.setattr(suite_run, "run_suite", lambda *args, **kwargs: lost)
    for command in ("run", "tune"):
        assert main([command, "suites/smoke.yaml", "--quiet"]) == 1, command
        assert "failed for good" in capsys.readouterr().err
    monkeypatch.setattr(suite_run, "run_suite", lambda *args, **kwargs: WorkSummary(cells_run=3))
    assert main(["tune", "suites/smoke.yaml", "--quiet"]) == 0


def search_trial(number: int, lr: float, value: float | None):
    """A finished search trial (its value None: an objective that never came back, as a frame's missing `select`)."""
    return FrozenTrial(number=number, trial_id=number, state=TrialState.COMPLETE, value=value, params={"lr": lr},
                       distributions={}, user_attrs={}, system_attrs={}, intermediate_values={},
                       datetime_start=None, datetime_complete=None)


def test_tunes_winner_is_the_selection_rules_choice_with_a_missing_value_and_a_tie():
    # lr 3e-3 has no value: the old rule counted it as -1.0 and tied it above nothing, choose_lr never picks it;
    # 1e-3 and 1e-2 tie at 80: the smaller lr wins
    trials = [search_trial(0, 3e-3, None), search_trial(1, 1e-2, 80.0), search_trial(2, 1e-3, 80.0),
              search_trial(3, 3e-2, 10.0)]
    frame = pd.DataFrame({"layer": "ln", "lr": [t.params["lr"] for t in trials],
                          "select": [math.nan if t.value is None else t.value for t in trials]})
    assert best_trial(trials).params["lr"] == chosen_lrs(frame, ["layer"])["lr"].item() == 1e-3
    only_missing = [search_trial(0, 3e-3, None), search_trial(1, 1e-2, -5.0)]  # a number beats no number
    assert best_trial(only_missing).number == 1
    same_lr = [search_trial(0, 1e-3, 50.0), search_trial(1, 1e-3, 70.0), search_trial(2, 1e-3, 70.0)]
    assert best_trial(same_lr).number == 1  # the lr's best val, ties to the earlier trial
