"""The shared view `normbench ui` stores: every key one the installed MLflow UI applies, runs grouped by depth and
layer (a collapsed row each, in the layer's colour of the leaderboard's figures) and all shown, the report cells
when there are, the axes right after the pinned columns, Model metrics first in the charts (val_top1, train_loss)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import mlflow

from normbench.report.style import layer_colour
from normbench.tracking.run_record import telemetry_metric
from normbench.tracking.view_state import CREATED, REPORT_FILTER, RUN_NAME, group_colours, view_state
from normbench.train.telemetry import QUANTITIES

AXES = ["depth", "layer", "lr", "seed"]
METRICS = {"val_top1", "train_loss", "scheduled_lr", "grad_norm", "images_per_sec", "test_top1", "val_top1_final",
           "diverged",
           *(telemetry_metric(p, q) for p in ("last", "first", "middle") for q in QUANTITIES)}


@cache
def bundle() -> str:
    """The installed MLflow UI's JavaScript (mlflow/server/js/build/static/js)."""
    folder = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    text = "".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.js")))
    assert "viewStateShareKey" in text, f"{folder}: no MLflow UI bundle with shared views here"
    return text


def string_array(*members: str, without: str = "") -> set[str]:
    """The one JS array literal of strings in the bundle holding all `members` (and not `without`)."""
    found = set()
    for match in re.finditer(r'\[(?:"[A-Za-z]+",)+"[A-Za-z]+"\]', bundle()):
        items = frozenset(re.findall(r'"([A-Za-z]+)"', match.group()))
        if set(members) <= items and without not in items:
            found.add(items)
    assert len(found) == 1, f"MLflow's UI bundle changed: {len(found)} arrays hold {members}"
    return set(next(iter(found)))


def test_every_key_is_one_the_installed_mlflow_ui_applies_from_a_shared_view() -> None:
    ui_state = string_array("selectedColumns", "groupBy", "compareRunCharts")
    dropped = string_array("runsPinned", "runsHidden", "runsExpanded", without="selectedColumns")
    facets = string_array("searchFilter", "orderByKey", "orderByAsc", "lifecycleFilter")
    state = view_state(AXES, METRICS)
    assert set(state) <= (ui_state - dropped) | facets, set(state) - ((ui_state - dropped) | facets)
    assert {"groupBy", "runsHiddenMode", "compareRunSections", "isAccordionReordered"} <= set(state)
    # the values MLflow's enums hold
    for literal in ('"SHOW_ALL"', 'Param="param"', 'Average="average"', '"Model metrics"', 'LINE="LINE"',
                    'BAR="BAR"', '"compareRunsMode"', 'CHART="CHART"', ".cardHeight)", ".columns)"):
        assert literal in bundle(), literal


def test_runs_are_grouped_by_depth_and_layer_a_collapsed_row_each_and_all_shown() -> None:
    groups = ["param.depth.12,param.layer.rezero", "param.depth.36,param.layer.rezero"]
    state = view_state(AXES, METRICS, groups=groups)
    assert state["groupBy"] == {"aggregateFunction": "average", "groupByKeys": [
        {"mode": "param", "groupByData": "depth"}, {"mode": "param", "groupByData": "layer"}]}
    assert state["groupsExpanded"] == dict.fromkeys(groups, False)
    assert state["runsHiddenMode"] == "SHOW_ALL" and state["useGroupedValuesInCharts"] is True
    assert view_state(["lr", "seed"], METRICS)["groupBy"] is None  # neither depth nor layer: nothing to group by
    assert 'groupByData:e,mode:t,value:n})=>`${t}.${e}.${n||null}`' in bundle()  # MLflow's group id, as built here
    assert '.map(p).join(",")' in bundle()


def test_each_group_has_its_layers_colour_from_the_leaderboards_figures() -> None:
    runs = [{"depth": "12", "layer": "rezero", "lr": "0.01"}, {"depth": "36", "layer": "rezero"},
            {"depth": "12", "layer": "layerscale"}, {}]  # the last: the `leaderboard` parent, no group
    assert group_colours(runs, AXES) == {"param.depth.12,param.layer.rezero": layer_colour("rezero"),
                                         "param.depth.36,param.layer.rezero": layer_colour("rezero"),
                                         "param.depth.12,param.layer.layerscale": layer_colour("layerscale")}
    assert '"experimentRunColors"' in bundle()  # where MLflow's UI keeps group colours (tracking/ui_app.py)


def test_a_suite_with_report_cells_shows_them_the_runs_the_leaderboard_scores() -> None:
    assert view_state(AXES, METRICS, reports=True)["searchFilter"] == REPORT_FILTER
    assert view_state(AXES, METRICS)["searchFilter"] == ""


def test_the_axes_come_right_after_the_pinned_name_and_created_columns_best_score_first() -> None:
    state = view_state(AXES, METRICS)
    params = ["params.`depth`", "params.`layer`", "params.`lr`", "params.`seed`"]
    assert state["columnOrder"][:6] == [RUN_NAME, CREATED, *params]
    assert state["columnOrder"][-1] == "duration"
    assert state["selectedColumns"] == [RUN_NAME, *params, "metrics.`test_top1`", "metrics.`val_top1_final`",
                                        "metrics.`diverged`"]
    assert state["orderByKey"] == "metrics.`test_top1`" and state["orderByAsc"] is False


def test_model_metrics_come_first_in_the_charts_val_top1_and_train_loss_leading() -> None:
    state = view_state(AXES, METRICS)
    sections = state["compareRunSections"]
    assert [s["name"] for s in sections] == ["Model metrics", "telemetry/first", "telemetry/middle",
                                             "telemetry/last", "System metrics"]
    assert state["isAccordionReordered"] is True  # else MLflow sorts Model metrics after every prefixed section
    assert sections[0]["isReordered"] is True  # else MLflow inserts other metrics' charts alphabetically before
    charts = state["compareRunCharts"]
    assert [c["metricKey"] for c in charts[:2]] == ["val_top1", "train_loss"]
    assert {c["metricSectionId"] for c in charts} == {sections[0]["uuid"]}
    assert {c["type"] for c in charts if c["metricKey"] in ("val_top1", "train_loss")} == {"LINE"}
    assert next(c for c in charts if c["metricKey"] == "test_top1")["type"] == "BAR"
    assert len({c["uuid"] for c in charts}) == len(charts)


def test_charts_are_listed_only_for_metrics_the_runs_have() -> None:
    charts = view_state(AXES, {"val_top1", "test_top1"})["compareRunCharts"]
    assert [c["metricKey"] for c in charts] == ["val_top1", "test_top1"]
