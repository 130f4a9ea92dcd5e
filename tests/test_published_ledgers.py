"""Every published results folder keeps its ledger, and optuna-dashboard can show it: each folder with a results.csv
has its ledger.journal (.gitignore tracks them); every finished cell there has its val curve (intermediate values)
and numeric scores; each opens through the dashboard's
own JSON API with a named objective, as tests/store/test_ledger_dashboard.py queries it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from optuna_dashboard._app import create_app
from optuna_dashboard._storage_url import get_storage

from normbench.store.migrations import OBJECTIVE_NAME

RESULTS = Path(__file__).resolve().parents[1] / "results"
PUBLISHED = sorted(p.parent.name for p in RESULTS.glob("*/results.csv"))
LEDGERS = sorted(p.parent.name for p in RESULTS.glob("*/ledger.journal"))


def no_finite_epoch(result: dict[str, Any]) -> bool:
    """A cell that diverged in its first epoch: no val to draw (the worker reports no diverged epoch's)."""
    return result.get("status") == "diverged" and result.get("best_val_epoch", -1) < 0


def test_every_folder_with_results_has_its_ledger() -> None:
    assert PUBLISHED, RESULTS
    missing = [name for name in PUBLISHED if name not in LEDGERS]
    assert not missing, (f"results/{missing[0]} publishes results.csv without ledger.journal: copy the run's ledger "
                         "there (or scripts/import_results_csv.py for a folder whose cells cannot be re-run)")


@pytest.mark.parametrize("name", LEDGERS)
def test_every_finished_cell_has_its_curve_and_numeric_scores(name: str) -> None:
    path = RESULTS / name / "ledger.journal"
    storage = JournalStorage(JournalFileBackend(str(path)))
    finished = 0
    for study in storage.get_all_studies():
        for t in storage.get_all_trials(storage.get_study_id_from_name(study.study_name), deepcopy=False):
            if t.state != TrialState.COMPLETE:
                continue
            finished += 1
            where = f"{path}: `{study.study_name}` trial {t.number}"
            result = t.user_attrs["result"]
            assert t.intermediate_values or no_finite_epoch(result), \
                f"{where} has no intermediate values"
            if t.intermediate_values:  # the curve ends at the last finite epoch's val (one point when imported)
                assert t.intermediate_values[max(t.intermediate_values)] == result["final_val_top1"], where
            for attr in ("test_top1", "val_top1"):
                assert isinstance(t.user_attrs.get(attr), float) and math.isfinite(t.user_attrs[attr]), (where, attr)
    assert finished
    for study in storage.get_all_studies():  # optuna-dashboard's name for the objective, not "Objective 0"
        assert optuna.load_study(study_name=study.study_name, storage=storage).metric_names == [OBJECTIVE_NAME]


def dashboard_get(app: Any, path: str, query: str = "") -> tuple[int, dict[str, Any]]:
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, QUERY_STRING=query)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    return int(status[0].split()[0]), json.loads(body)


@pytest.mark.parametrize("name", LEDGERS)
def test_each_ledger_opens_in_optuna_dashboard_with_its_curves(name: str) -> None:
    app = create_app(get_storage(str(RESULTS / name / "ledger.journal")))
    code, summaries = dashboard_get(app, "/api/studies")
    assert code == 200 and summaries["study_summaries"]
    for summary in summaries["study_summaries"]:
        code, study = dashboard_get(app, f"/api/studies/{summary['study_id']}", "after=0")
        assert code == 200, summary["study_name"]
        assert study["objective_names"] == ["val_top1_final_epoch"]
        complete = [t for t in study["trials"] if t["state"] == "Complete"]
        assert complete and any(t["intermediate_values"] for t in complete), summary["study_name"]
