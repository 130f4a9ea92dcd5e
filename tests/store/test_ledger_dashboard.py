"""optuna-dashboard on a ledger: every trial lists its cell's axes as params, the objective has a name, parameter
importance answers, and a matrix that grows later still queues and finishes (no "dynamic value space" error).

The dashboard is queried through its own WSGI app (the JSON API its pages read), on the ledger file as
`optuna-dashboard <out>/ledger.journal` opens it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from optuna_dashboard._app import create_app
from optuna_dashboard._storage_url import get_storage

from normbench.contracts.results import CellResult
from normbench.contracts.suite import cell_id
from normbench.store.ledger import Ledger

FIRST = {"depth": [1, 2], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0]}
GROWN = {"depth": [1, 2, 4], "layer": ["layernorm", "rezero", "dyt"], "lr": [1e-3, 3e-3], "seed": [0]}


def cells(matrix: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    points = [dict(zip(matrix, values, strict=True)) for values in itertools.product(*matrix.values())]
    return {cell_id(axes): axes for axes in points}


def train_all(ledger: Ledger, matrix: dict[str, list[Any]]) -> int:
    """Queue the matrix and finish every waiting cell with a made-up score that depends on its axes."""
    study = ledger.study("run:grow")
    ledger.enqueue(study, cells(matrix))
    finished = 0
    while (claim := ledger.claim(study)) is not None:
        axes = claim.user_attrs["axes"]
        score = 10.0 * axes["depth"] + (50.0 if axes["layer"] == "layernorm" else 0.0) + 1000 * axes["lr"]
        claim.finish(CellResult.from_summary({"status": "ok", "best_val_top1": score}))
        finished += 1
    return finished


class Dashboard:
    def __init__(self, storage: str) -> None:
        self.app = create_app(get_storage(storage))

    def get(self, path: str, query: str = "") -> tuple[int, dict[str, Any]]:
        environ: dict[str, Any] = {}
        setup_testing_defaults(environ)
        environ.update(PATH_INFO=path, QUERY_STRING=query)
        status: list[str] = []
        body = b"".join(self.app(environ, lambda s, headers, exc_info=None: status.append(s)))
        return int(status[0].split()[0]), json.loads(body)

    def study(self, name: str) -> dict[str, Any]:
        _, summaries = self.get("/api/studies")
        study_id = next(s["study_id"] for s in summaries["study_summaries"] if s["study_name"] == name)
        code, detail = self.get(f"/api/studies/{study_id}", "after=0")
        assert code == 200
        return {"id": study_id, **detail}


def shown_params(trial: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["param_external_value"] for p in trial["params"]}


def as_shown(axes: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in axes.items()}


def test_dashboard_lists_each_trial_with_its_axes_and_a_named_objective(tmp_path: Path) -> None:
    ledger = Ledger(None, tmp_path)
    assert train_all(ledger, FIRST) == 4
    dashboard = Dashboard(str(tmp_path / "ledger.journal"))
    study = dashboard.study("run:grow")
    assert study["objective_names"] == ["val_top1_final_epoch"]
    assert len(study["trials"]) == 4
    for trial in study["trials"]:
        cell = next(a["value"] for a in trial["user_attrs"] if a["key"] == "cell_id")
        assert shown_params(trial) == as_shown(cells(FIRST)[cell])
    code, importances = dashboard.get(f"/api/studies/{study['id']}/param_importances")
    assert code == 200
    names = {p["name"] for p in importances["param_importances"][0]}
    assert {"depth", "layer"} <= names


def test_a_grown_matrix_queues_and_finishes_and_the_dashboard_still_answers(tmp_path: Path) -> None:
    ledger = Ledger(None, tmp_path)
    assert train_all(ledger, FIRST) == 4
    assert train_all(ledger, GROWN) == len(cells(GROWN)) - 4  # the first four are not queued again
    dashboard = Dashboard(str(tmp_path / "ledger.journal"))
    study = dashboard.study("run:grow")
    assert sorted(shown_params(t)["layer"] for t in study["trials"] if shown_params(t)["depth"] == "4") == \
        ["dyt"] * 2 + ["layernorm"] * 2 + ["rezero"] * 2
    by_cell = {cell_id({k: type(v)(shown_params(t)[k]) for k, v in GROWN_TYPES.items()}) for t in study["trials"]}
    assert by_cell == set(cells(GROWN))
    code, _ = dashboard.get(f"/api/studies/{study['id']}/param_importances")
    assert code == 200


GROWN_TYPES = {"depth": 0, "layer": "", "lr": 0.0, "seed": 0}


@pytest.mark.parametrize("grow", [False, True])
def test_a_shared_database_ledger_takes_the_axes_too(tmp_path: Path, grow: bool) -> None:
    """A database checks a categorical's choices on every new trial: a grown text axis is left out of the new
    trials' params there, and everything still queues and finishes."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path)
    train_all(ledger, FIRST)
    if grow:
        train_all(ledger, GROWN)
    study = ledger.study("run:grow")
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.user_attrs["cell_id"] for t in trials) == sorted(cells(GROWN if grow else FIRST))
    assert all(t.state.name == "COMPLETE" for t in trials)
    first = [t for t in trials if t.user_attrs["cell_id"] in cells(FIRST)]
    assert len(first) == len(cells(FIRST)) and all(t.params == t.user_attrs["axes"] for t in first)
    grown = [t for t in trials if t.user_attrs["cell_id"] not in cells(FIRST)]
    assert all("layer" not in t.params for t in grown)  # its choices grew: left out there, kept in the user attrs
    for t in trials:  # numeric axes always, text axes unless their choices grew
        assert {k: t.user_attrs["axes"][k] for k in ("depth", "lr", "seed")} == {k: t.params[k] for k in
                                                                                 ("depth", "lr", "seed")}
