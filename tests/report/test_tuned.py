"""The tuned sections of a leaderboard: how far each tuned value moved from the grid's recipe, and what mattered in
each search (Optuna's own importances)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
import pytest

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import parse_suite
from normbench.report.leaderboard import importance_section, search_importances, tuned_section, tuning_budget_section
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


def test_the_tuned_lr_is_measured_from_the_lr_the_reference_grid_selected_for_its_row(tmp_path):
    """A grid shares no single lr: the tuned lr's distance is from the lr the grid chose for that row (on its
    selection seeds), not from the suite's `train.lr`, which no row may have trained at."""
    suite = parse_suite({"name": "t", "dataset": {"name": "digits"}, "train": {"lr": 1e-3},
                         "matrix": {"depth": [36], "layer": ["layerscale", "layernorm"], "seed": [0]}},
                        Path("t.yaml"))
    grid = tmp_path / "grid"
    grid.mkdir()
    select = [{"layer": layer, "depth": 36, "lr": lr, "seed": seed, "status": "ok", "role": "select",
               "val_top1": val, "test_top1": val} for layer, lr, val in
              [("layerscale", 1e-3, 80.0), ("layerscale", 1e-2, 90.0), ("layernorm", 1e-3, 85.0)]
              for seed in (0, 1)]
    report = [{"layer": "layerscale", "depth": 36, "lr": 1e-3, "seed": 100, "status": "ok", "role": "report",
               "val_top1": 99.0, "test_top1": 99.0}]  # a report cell never selects
    pd.DataFrame(select + report).to_csv(grid / "results.csv", index=False)
    tuned = pd.DataFrame([{"layer": layer, "depth": 36, "seed": 100, "status": "ok", "val_top1": 90.0,
                           "test_top1": 88.0, "tuned_params": {"lr": 2e-2}} for layer in ("layerscale", "layernorm")])
    lines = tuned_section(tuned, suite, [grid])
    assert moved_column(lines) == {"layerscale": "lr x2", "layernorm": "lr x20"}  # 2e-2 against 1e-2 and 1e-3
    lacking = pd.concat([tuned, tuned.iloc[:1].assign(layer="rmsnorm")], ignore_index=True)  # no grid row: said
    suite.matrix["layer"].append("rmsnorm")
    assert moved_column(tuned_section(lacking, suite, [grid]))["rmsnorm"] == "lr x20 (vs train.lr: not in the grid)"
    assert any(f"the lr against the lr `{grid}` selected for the row" in line for line in lines)
    missing = tuned_section(tuned, suite, [tmp_path / "nowhere"])  # no grid to read: the recipe's 1e-3, and why
    assert moved_column(missing) == {"layerscale": "lr x20", "layernorm": "lr x20"}
    assert any("not found" in line for line in missing)


def test_a_row_the_first_reference_lacks_is_measured_from_the_next_that_has_it(tmp_path):
    """A tuned suite's rows may come from two grids (the tuned folder's learnable_scaler and fixup are in the
    converged folder, not the modern one): `reference:` as a list, the first folder that has a row gives its lr."""
    suite = parse_suite({"name": "t", "dataset": {"name": "digits"}, "train": {"lr": 1e-3},
                         "matrix": {"depth": [36], "layer": ["layerscale", "fixup", "rmsnorm"], "seed": [0]},
                         "reference": ["grid", "older"]}, Path("t.yaml"))
    grids = {"grid": [("layerscale", 1e-2)], "older": [("layerscale", 1e-3), ("fixup", 4e-3)]}
    for name, rows in grids.items():
        (tmp_path / name).mkdir()
        pd.DataFrame([{"layer": layer, "depth": 36, "lr": lr, "seed": 0, "status": "ok", "role": "select",
                       "val_top1": 90.0, "test_top1": 90.0} for layer, lr in rows]).to_csv(
            tmp_path / name / "results.csv", index=False)
    tuned = pd.DataFrame([{"layer": layer, "depth": 36, "seed": 100, "status": "ok", "val_top1": 90.0,
                           "test_top1": 88.0, "tuned_params": {"lr": 2e-2}} for layer in ("layerscale", "fixup",
                                                                                          "rmsnorm")])
    lines = tuned_section(tuned, suite, [tmp_path / "grid", tmp_path / "older", tmp_path / "gone"])
    # layerscale from the first grid (not the older one's 1e-3), fixup from the older, rmsnorm from neither
    assert moved_column(lines) == {"layerscale": "lr x2", "fixup": f"lr x5 (vs {tmp_path / 'older'})",
                                   "rmsnorm": "lr x20 (vs train.lr: not in the grid)"}
    assert any("the first of" in line and "not found" in line for line in lines)


def moved_column(lines: list[str]) -> dict[str, str]:
    """layer -> the "moved from the grid's recipe" cell of a markdown tuned table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in "\n".join(lines).splitlines()
            if line.startswith("|")]
    at = rows[0].index("moved from the grid's recipe")
    return {row[0]: row[at] for row in rows[2:]}


def test_the_budget_counts_spent_trials_and_tells_a_stop_from_an_error(tmp_path):
    """Spent: finished or pruned (diverged among the finished). A FAIL is queued again, so it is not spent, and a
    stopped run's give-back is not an error: both a SIGTERM and a cell that raised are FAIL records."""
    ledger, names = Ledger(None, tmp_path), StudyNames("t")
    study = ledger.study(names.tune("depth=2,layer=dyt"))
    create = optuna.trial.create_trial
    study.add_trial(create(state=optuna.trial.TrialState.COMPLETE, value=91.0, user_attrs={"result": {"status": "ok"}}))
    study.add_trial(create(state=optuna.trial.TrialState.COMPLETE, value=0.0,
                           user_attrs={"result": {"status": "diverged"}}))
    study.add_trial(create(state=optuna.trial.TrialState.PRUNED))
    study.add_trial(create(state=optuna.trial.TrialState.FAIL))  # given back by a SIGTERM
    study.add_trial(create(state=optuna.trial.TrialState.FAIL))
    study.add_trial(create(state=optuna.trial.TrialState.FAIL, user_attrs={"error": "RuntimeError: boom"}))
    header, _, row = tuning_budget_section(ledger, names)[2].splitlines()[:3]
    def split(line: str) -> list[str]:
        return [c.strip() for c in line.strip("|").split("|")]

    assert dict(zip(split(header), split(row), strict=True)) == {
        "study": "depth=2,layer=dyt", "trials": "3", "pruned": "1", "diverged": "1", "stopped or lost (re-run)": "2",
        "raised (re-run)": "1", "best val top-1 (%, final epoch)": "91.00"}


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
    assert "PED-ANOVA" in table and lr > 0.8 > wd
    assert importance_section(ledger, names) == lines  # deterministic: a regenerated leaderboard reads the same


def test_importances_are_the_ones_optuna_dashboard_shows(tmp_path):
    from tests.store.test_ledger_dashboard import Dashboard

    ledger = Ledger(None, tmp_path)
    names = StudyNames("t")
    study = ledger.study(names.tune("depth=2,layer=layernorm"))
    study.sampler = optuna.samplers.RandomSampler(seed=2)
    for _ in range(16):
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
                           "weight_decay": optuna.distributions.FloatDistribution(0.0, 0.1)})
        study.tell(trial, 100.0 - 1000.0 * abs(trial.params["lr"] - 3e-3) - 50 * trial.params["weight_decay"])
    dashboard = Dashboard(str(tmp_path / "ledger.journal"))  # its JSON API, as its page reads it
    code, shown = dashboard.get(f"/api/studies/{dashboard.study(study.study_name)['id']}/param_importances")
    assert code == 200
    ours = search_importances(study)
    assert set(ours) == {"lr", "weight_decay"}
    assert {i["name"]: i["importance"] for i in shown["param_importances"][0]} == pytest.approx(ours, abs=1e-12)
    table = "\n".join(importance_section(ledger, names))
    assert f"| {ours['lr']:.2f} " in table and f"| {ours['weight_decay']:.2f} " in table
