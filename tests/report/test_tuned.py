"""The tuned sections of a leaderboard: how far each tuned value moved from the grid's recipe, and what mattered in
each search (Optuna's own importances)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import parse_suite
from normbench.report.leaderboard import importance_section
from normbench.report.tables import tuned_table
from normbench.store.ledger import Ledger


def test_the_tuned_table_says_how_far_each_value_moved_from_the_grids_recipe():
    suite = parse_suite({"name": "t", "dataset": {"name": "digits"}, "train": {"lr": 1e-3, "weight_decay": 0.05},
                         "matrix": {"depth": [36], "layer": ["layerscale"], "seed": [0]}}, Path("t.yaml"))
    config = {"lr": 3.16e-3, "weight_decay": 0.05, "warmup_epochs": 0.0, "layer.init_values": 1e-4,
              "adam_beta2": 0.95}
    tuned = pd.DataFrame([{"layer": "layerscale", "depth": 36, "seed": s, "status": "ok", "val_top1": 90.0,
                           "test_top1": 88.0 + s, "tuned_params": config} for s in (100, 101)])
    row = tuned_table(tuned, suite).iloc[0]
    # lr 3.16x the recipe's; weight decay unchanged; warmup 1 epoch (the default) -> 0; CaiT's 1e-6 at depth 36 x100;
    # beta2 from the optimizer's own 0.999 (the recipe leaves it unset), not from "None"
    assert row["moved from the grid's recipe"] == \
        "lr x3.16, weight_decay =, warmup_epochs -1, layer.init_values x100, adam_beta2 /1.05"
    assert "moved from the grid's recipe" not in tuned_table(tuned).columns  # without a suite, nothing to measure


def test_importances_are_optunas_own_and_name_the_value_that_mattered(tmp_path):
    ledger = Ledger(None, tmp_path)
    names = StudyNames("t")
    study = ledger.study(names.tune("depth=2,layer=layernorm"))
    rng = optuna.samplers.RandomSampler(seed=1)
    study.sampler = rng
    for _ in range(24):  # the val depends on the lr alone; weight decay is noise-free and irrelevant
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
                           "weight_decay": optuna.distributions.FloatDistribution(0.0, 0.1)})
        study.tell(trial, 100.0 - 1000.0 * abs(trial.params["lr"] - 3e-3))
    lines = importance_section(ledger, names)
    table = "\n".join(lines)
    row = next(line for line in table.splitlines() if line.startswith("| depth=2,layer=layernorm"))
    lr, wd = (float(x) for x in row.strip("|").split("|")[1:3])
    assert "fANOVA" in table and lr > 0.8 > wd
    assert importance_section(ledger, names) == lines  # seeded: a regenerated leaderboard reads the same
