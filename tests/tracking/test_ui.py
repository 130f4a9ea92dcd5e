"""`normbench ui` and what MLflow holds for it: the comparison view (model-training kind, axes and score as columns,
best score first), cells nested under the `leaderboard` run, one param per axis, attempt-numbered run names, and a
busy port that fails with its number. (test_view_state.py: the view's contents; test_ui_server.py: the server;
test_sync.py: how the runs get there.)"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.selection import cell_scores
from normbench.store.ledger import Ledger
from normbench.tracking.run_record import axes_of, final_points, run_params
from normbench.tracking.sync import sync
from normbench.tracking.ui import KIND, KIND_TAG, suite_axes, ui_url
from normbench.tracking.view_state import SHARE_KEY, SHARE_TAG, view_state
from tests.tracking.ledgers import fail_trial, history, result, write_ledger


def test_view_state_shows_the_axes_and_the_score_sorted_best_first() -> None:
    state = view_state(["depth", "layer", "lr", "seed"])
    assert state["orderByKey"] == "metrics.`test_top1`" and state["orderByAsc"] is False
    assert state["selectedColumns"][1:4] == ["params.`depth`", "params.`layer`", "params.`lr`"]  # no averaged seed
    assert "metrics.`test_top1`" in state["selectedColumns"] and "metrics.`val_top1_final`" in state["selectedColumns"]


def test_url_opens_the_runs_table_in_the_model_training_workflow_with_the_view() -> None:
    url = ui_url("0.0.0.0", 5001, "7")
    assert url == ("http://127.0.0.1:5001/#/experiments/7/runs?workflowType=machine_learning"
                   f"&viewStateShareKey={SHARE_KEY}")
    assert ui_url("0.0.0.0", 5001, "7", charts=True) == f"{url}&compareRunsMode=CHART"


def test_axes_follow_the_suite_order_and_include_tuned_keys(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(
        "name: t\ndataset: {name: digits}\nmatrix: {layer: [layernorm], depth: [1], seed: [0]}\n"
        "tune: {trials: 2, space: {lr: {low: 1.0e-3, high: 1.0e-2, log: true}}}\n")
    params = [{"layer": "layernorm", "depth": "1", "seed": "0", "train.lr": "0.002", "model.embed_dim": "16"}]
    assert suite_axes(tmp_path, params) == ["layer", "depth", "seed", "train.lr"]
    assert suite_axes(tmp_path / "nowhere", params) == ["depth", "layer", "seed"]


def test_run_params_show_each_axis_once_and_name_the_axes_without_guessing() -> None:
    from normbench.contracts.suite import parse_suite

    suite = parse_suite({"name": "p", "dataset": {"name": "digits"},
                         "matrix": {"depth": [2], "layer": ["rezero"], "lr": [1e-3], "seed": [0]}}, Path("p.yaml"))
    [cell] = suite.cells()
    params = run_params(cell.axes, cell.config, {"train_size": 1077}, role="select")
    assert params["layer"] == "rezero" and params["lr"] == "0.001" and params["data.train_size"] == "1077"
    assert not {"model.layer", "train.lr", "model.depth"} & set(params)  # an axis shows once, bare
    assert "model.embed_dim" in params and params["data.name"] == "digits" and params["role"] == "select"
    assert axes_of(params) == {k: str(v) for k, v in cell.axes.items()}  # every axis, and the role is none


def test_the_score_columns_are_the_leaderboards() -> None:
    """As contracts/selection.py add_scores: test top-1 scores, val top-1 selects, a diverged cell is 0 for both."""
    ok = {"status": "ok", "val_top1": 81.234, "test_top1": 79.876, "best_val_top1": 90.0}
    assert cell_scores(ok) == {"score": 79.876, "select": 81.234}  # unrounded: a mean in MLflow is the leaderboard's
    assert cell_scores({**ok, "status": "diverged"}) == {"score": 0.0, "select": 0.0}
    assert cell_scores({**ok, "status": "pruned", "test_top1": float("nan")}) == {}
    logged = {k: v for k, v, _, step in final_points(ok, 0)}  # MLflow's names say what they are
    assert (logged["test_top1"], logged["val_top1_final"], logged["diverged"]) == (79.876, 81.234, 0.0)
    logged = {k: v for k, v, _, step in final_points({**ok, "status": "diverged"}, 0)}
    assert (logged["test_top1"], logged["val_top1_final"], logged["diverged"]) == (0.0, 0.0, 1.0)


def test_a_rerun_is_named_apart_from_the_run_it_replaces(tmp_path: Path) -> None:
    """The ledger re-queues a cell whose worker died as a new trial (retry_history names the one it replaces): its
    run is `... #2`, the killed attempt's run FAILED beside it, both under the one `leaderboard` parent."""
    write_ledger(tmp_path, layers=("layernorm",))
    first = fail_trial(tmp_path, "rezero")
    axes = {"depth": 1, "layer": "rezero", "lr": 1e-3, "seed": 0}
    Ledger(None, tmp_path).study("run:tiny").add_trial(optuna.trial.create_trial(
        state=TrialState.COMPLETE, value=40.0, system_attrs={"retry_history": [first]},
        user_attrs={"cell_id": "depth=1,layer=rezero,lr=0.001,seed=0", "axes": axes, "result": result(3),
                    "history": history(3)}))
    sync(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    named = sorted((r.info.run_name, r.info.status) for r in runs)
    assert named == [("d1 layernorm lr1e-3 s0", "FINISHED"), ("d1 rezero lr1e-3 s0", "FAILED"),
                     ("d1 rezero lr1e-3 s0 #2", "FINISHED"), ("leaderboard", "FINISHED")]
    parent = next(r.info.run_id for r in runs if r.info.run_name == "leaderboard")
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs if r.info.run_id != parent} == {parent}
    assert sync(tmp_path).present == 3  # a second sync finds the same parent and every run


SERVED = """
import json, os, sys
os.environ["_MLFLOW_SERVER_FILE_STORE"] = sys.argv[1]
from mlflow.server import app
client = app.test_client()
experiment = client.get("/ajax-api/2.0/mlflow/experiments/get-by-name", query_string={"experiment_name": "tiny"}).json
runs = client.post("/ajax-api/2.0/mlflow/runs/search", json={
    "experiment_ids": [experiment["experiment"]["experiment_id"]], "order_by": ["metrics.`test_top1` DESC"]}).json
print(json.dumps({"experiment": experiment["experiment"], "runs": runs["runs"]}))
"""


def test_the_served_api_has_the_view_the_nesting_and_the_columns(write_suite, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 0
    from normbench.tracking.ui import prepare_experiment

    prepare_experiment(f"sqlite:///{out / 'mlflow.db'}", out)  # `run` synced the store at its end
    served = subprocess.run([sys.executable, "-c", SERVED, f"sqlite:///{out / 'mlflow.db'}"], capture_output=True,
                            text=True, timeout=120, check=True)
    body = json.loads(served.stdout.strip().splitlines()[-1])
    tags = {t["key"]: t["value"] for t in body["experiment"]["tags"]}
    assert tags[KIND_TAG] == KIND
    view = json.loads(tags[SHARE_TAG])
    assert view["selectedColumns"][1:4] == ["params.`depth`", "params.`layer`", "params.`lr`"]

    runs = body["runs"]
    parent = next(r for r in runs if r["info"]["run_name"] == "leaderboard")
    cells = [r for r in runs if r is not parent]
    assert len(cells) == 2
    assert "leaderboard.md" in {Path(a.path).name for a in
                                MlflowClient(f"sqlite:///{out / 'mlflow.db'}").list_artifacts(parent["info"]["run_id"])}
    scores = []
    for run in cells:
        tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
        params = {p["key"] for p in run["data"]["params"]}
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert tags["mlflow.parentRunId"] == parent["info"]["run_id"]
        assert {"depth", "layer", "lr", "seed"} <= params
        assert not {"model.layer", "model.depth", "train.lr", "train.seed"} & params
        assert {"data.train_size", "data.val_size"} <= params  # the true split sizes (run_record.result_params)
        assert "lr" not in metrics and "test_top1" in metrics and "scheduled_lr" in metrics
        scores.append(metrics["test_top1"])
    assert scores == sorted(scores, reverse=True)


def test_a_busy_port_exits_nonzero_naming_the_port(tmp_path: Path, capsys) -> None:
    (tmp_path / "mlflow.db").touch()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["ui", str(tmp_path), "--port", str(port), "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert f"port {port}" in err and f"--port {port + 1}" in err


def test_a_new_store_starts_without_mlflow_info_lines(tmp_path: Path) -> None:
    write_ledger(tmp_path, layers=("layernorm",))
    code = f"from normbench.tracking.sync import sync; sync({str(tmp_path)!r})"
    started = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert (tmp_path / "mlflow.db").exists()
    assert "Creating initial MLflow database tables" not in started.stderr and " INFO " not in started.stderr


def test_a_folder_of_several_depths_opens_on_the_deepest_each_other_depth_one_link_away(tmp_path: Path) -> None:
    from normbench.tracking.ui import depth_urls, prepare_experiment
    from normbench.tracking.view_state import SHARE_TAG, share_key

    write_ledger(tmp_path, layers=("layernorm", "layerscale"))  # depth 1
    axes = {"depth": 12, "layer": "layerscale", "lr": 1e-3, "seed": 0}
    Ledger(None, tmp_path).study("run:tiny").add_trial(optuna.trial.create_trial(
        state=TrialState.COMPLETE, value=40.0, user_attrs={"cell_id": "depth=12,layer=layerscale,lr=0.001,seed=0",
                                                            "axes": axes, "result": result(3), "history": history(3)}))
    sync(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment_id, colours, depths = prepare_experiment(uri, tmp_path)
    assert depths == ["12", "1"]  # numerically, deepest first
    assert colours["param.depth.12,param.layer.layerscale"] == colours["param.depth.1,param.layer.layerscale"]
    client = MlflowClient(uri)
    tags = client.get_experiment(experiment_id).tags
    for depth, tag in (("12", SHARE_TAG), ("1", f"mlflow.sharedViewState.{share_key('1', '12')}")):
        view = json.loads(tags[tag])
        shown = client.search_runs([experiment_id], filter_string=view["searchFilter"])  # MLflow applies the filter
        assert {r.data.params["depth"] for r in shown} == {depth}
        assert set(view["groupsExpanded"]) == {g for g in colours if g.startswith(f"param.depth.{depth},")}
    assert depth_urls("127.0.0.1", 5000, experiment_id, depths) == [
        f"  depth 1: {ui_url('127.0.0.1', 5000, experiment_id, key=share_key('1', '12'))}"]
