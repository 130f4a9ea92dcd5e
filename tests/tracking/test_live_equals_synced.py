"""A store rebuilt from the ledger equals the one logged live (tracking/run_record.py `trial_run`, used by both): a
tiny `tune` and a tiny `run` are logged live with the end-of-run sync switched off, so the store holds only what the
worker wrote; then `normbench sync` rebuilds the ledger into a fresh store. Every cell run must match: its name, params,
tags and every metric's (step, value) history. Before the one description, a synced search trial had 6 params (a
bare `lr`, no seed, no recipe) where the live one had ~45."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from normbench.cli import main
from normbench.sweep import suite_run
from normbench.tracking.selected_lr import AT_SELECTED_TAG
from normbench.tracking.sync import sync

TUNE = {"trials": 1, "space": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}}}
MATRIX = {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1.0e-3], "seed": [0]}
IDS = ("mlflow.parentRunId",)  # run ids differ between two stores; each run must have one all the same


def cell_runs(uri: str, experiment: str, leave_out: tuple[str, ...] = ()) -> dict[tuple[str, str], dict[str, Any]]:
    """Every cell run of the suite's experiment in `uri`, by (study, trial): name, status, params, tags (but those
    `leave_out` names), metrics."""
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"{uri} has no experiment {experiment}"
    runs = {}
    for run in client.search_runs([found.experiment_id], max_results=1000):
        tags = run.data.tags
        if "study" not in tags:  # the suite's `leaderboard` parent run
            continue
        assert all(tags.get(k) for k in IDS), tags
        history = {key: sorted((m.step, "nan" if math.isnan(m.value) else m.value)
                               for m in client.get_metric_history(run.info.run_id, key)) for key in run.data.metrics}
        runs[tags["study"], tags["trial"]] = {
            "name": run.info.run_name, "status": run.info.status, "params": dict(run.data.params),
            "tags": {k: v for k, v in tags.items() if k not in (*IDS, *leave_out)}, "metrics": history}
    return runs


def differences(live: dict[str, Any], synced: dict[str, Any]) -> dict[str, Any]:
    """What tells two runs apart, field by field (only the keys whose values differ)."""
    out: dict[str, Any] = {}
    for field in ("name", "status"):
        if live[field] != synced[field]:
            out[field] = (live[field], synced[field])
    for field in ("params", "tags", "metrics"):
        keys = set(live[field]) | set(synced[field])
        diff = {k: (live[field].get(k), synced[field].get(k)) for k in sorted(keys)
                if live[field].get(k) != synced[field].get(k)}
        if diff:
            out[field] = diff
    return out


@pytest.mark.parametrize("command", ["tune", "run"])
def test_a_store_synced_from_the_ledger_equals_the_one_logged_live(command, write_suite, tmp_path: Path,
                                                                    monkeypatch, one_torch_thread):
    path = write_suite(matrix=MATRIX, tune=TUNE)
    out = tmp_path / "out"
    monkeypatch.setattr(suite_run, "synced", lambda *args, **kwargs: None)  # the store as the worker left it
    assert main([command, str(path), "--out", str(out), "--quiet", "--set", "train.epochs=2"]) == 0
    # what the worker logged; the tag a sync derives from the whole ledger (each row's selected lr) comes next
    live = cell_runs(f"sqlite:///{out / 'mlflow.db'}", "tiny", leave_out=(AT_SELECTED_TAG,))
    kinds = {study.split(":")[0] for study, _ in live}
    assert kinds == ({"tune", "tuned"} if command == "tune" else {"run"}), live.keys()

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    rebuilt = sync(out, tracking_uri=fresh)
    assert rebuilt.added == len(live), rebuilt.line()
    synced = cell_runs(fresh, "tiny", leave_out=(AT_SELECTED_TAG,))
    assert synced.keys() == live.keys()
    apart = {key: d for key in live if (d := differences(live[key], synced[key]))}
    assert not apart, apart
    if command == "tune":  # the search trial as a user of MLflow reads it: its sampled lr in the recipe, its seed
        searches = [run for (study, _), run in live.items() if study.startswith("tune:")]
        assert len(searches) == 2  # a study per layer, one trial each
        for search in searches:
            assert {"train.lr", "model.embed_dim"} <= set(search["params"]) and search["params"]["seed"] == "1"
            assert "lr" not in search["params"] and len(search["params"]) > 30

    # and the live store is whole: the sync at a run's end finds every run complete, adding and completing nothing,
    # and leaves it equal to the rebuilt one, every tag included
    again = sync(out)
    assert (again.added, again.completed, again.present) == (0, 0, len(live)), again.line()
    whole, rebuilt_whole = cell_runs(f"sqlite:///{out / 'mlflow.db'}", "tiny"), cell_runs(fresh, "tiny")
    apart = {key: d for key in whole if (d := differences(whole[key], rebuilt_whole[key]))}
    assert not apart, apart
    # one lr a row, or the search's choice re-run; a search trial chooses nothing
    assert {run["tags"].get(AT_SELECTED_TAG) for run in whole.values() if run["tags"]["kind"] != "tune"} == {"yes"}
