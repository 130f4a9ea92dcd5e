"""`normbench tune`: the search trains on a seed no re-run uses, and the re-runs are reported by test top-1."""

from __future__ import annotations

import pandas as pd

from normbench.cli import main
from normbench.spec.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep.tune import search_seed, seeds
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
    row = next(line for line in board.splitlines() if line.startswith("| layernorm "))
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
