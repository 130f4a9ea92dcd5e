"""The shared view `normbench ui` stores: every key one the installed MLflow UI applies, runs grouped by layer and
all shown, the axes right after the pinned columns, Model metrics first in the charts (val_top1, train_loss)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import mlflow

from normbench.tracking.naming import telemetry_metric
from normbench.tracking.view_state import CREATED, RUN_NAME, view_state
from normbench.train.telemetry import QUANTITIES

AXES = ["depth", "layer", "lr", "seed"]
METRICS = {"val_top1", "train_loss", "scheduled_lr", "grad_norm", "images_per_sec", "score", "select", "diverged",
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


def test_runs_are_grouped_by_layer_and_all_shown() -> None:
    state = view_state(AXES, METRICS)
    assert state["groupBy"] == {"aggregateFunction": "average",
                                "groupByKeys": [{"mode": "param", "groupByData": "layer"}]}
    assert state["runsHiddenMode"] == "SHOW_ALL" and state["useGroupedValuesInCharts"] is True
    assert view_state(["depth", "lr"], METRICS)["groupBy"] is None  # no layer axis: nothing to group by


def test_the_axes_come_right_after_the_pinned_name_and_created_columns_best_score_first() -> None:
    state = view_state(AXES, METRICS)
    params = ["params.`depth`", "params.`layer`", "params.`lr`", "params.`seed`"]
    assert state["columnOrder"][:6] == [RUN_NAME, CREATED, *params]
    assert state["columnOrder"][-1] == "duration"
    assert state["selectedColumns"] == [RUN_NAME, *params, "metrics.`score`", "metrics.`select`",
                                        "metrics.`diverged`"]
    assert state["orderByKey"] == "metrics.`score`" and state["orderByAsc"] is False


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
    assert next(c for c in charts if c["metricKey"] == "score")["type"] == "BAR"
    assert len({c["uuid"] for c in charts}) == len(charts)


def test_charts_are_listed_only_for_metrics_the_runs_have() -> None:
    charts = view_state(AXES, {"val_top1", "score"})["compareRunCharts"]
    assert [c["metricKey"] for c in charts] == ["val_top1", "score"]
