"""The shared view `normbench ui` stores: every key one the installed MLflow UI applies, runs grouped by depth and
layer (a collapsed row each, in colours told apart) and all shown, one depth a view, the report cells when there are,
the axes right after the pinned columns, Model metrics first in the charts (val_top1, train_loss)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import mlflow
import numpy as np

from normbench.report.style import CANONICAL, layer_colour
from normbench.tracking.run_record import telemetry_metric
from normbench.tracking.view_state import (
    CREATED,
    REPORT_FILTER,
    RUN_NAME,
    SHARE_KEY,
    VIEW_COLOURS,
    group_colours,
    share_key,
    view_state,
)
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


def test_each_group_has_its_layers_view_colour_the_same_at_every_depth_in_the_suites_order() -> None:
    runs = [{"depth": "12", "layer": "rezero", "lr": "0.01"}, {"depth": "36", "layer": "rezero"},
            {"depth": "12", "layer": "layerscale"}, {"depth": "12", "layer": "plugin"}, {}]  # {}: the parent run
    assert group_colours(runs, AXES, ["layerscale", "rezero", "absent"]) == {
        "param.depth.12,param.layer.rezero": VIEW_COLOURS[1], "param.depth.36,param.layer.rezero": VIEW_COLOURS[1],
        "param.depth.12,param.layer.layerscale": VIEW_COLOURS[0], "param.depth.12,param.layer.plugin": VIEW_COLOURS[2]}
    assert group_colours(runs, ["lr", "seed"]) == {}  # no layer: MLflow's own colours
    assert '"experimentRunColors"' in bundle()  # where MLflow's UI keeps group colours (tracking/ui_app.py)


def cie76(colours: list[str]) -> np.ndarray:
    """Pairwise CIE76 deltaE of sRGB hex colours (D65 white), the diagonal infinite."""
    rgb = np.array([[int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)] for c in colours])
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = linear @ np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                             [0.0193339, 0.1191920, 0.9503041]]).T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    lab = np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)
    distance = np.sqrt(((lab[:, None] - lab[None]) ** 2).sum(-1))
    np.fill_diagonal(distance, np.inf)
    return distance


def test_24_rows_get_colours_a_reader_tells_apart() -> None:
    """CIE76 deltaE: ~2.3 is just noticeable, 10+ reads as another colour at a glance; the view keeps 20+ for 24 rows
    (the leaderboard figures' palette has pairs under 5, told apart there by marker)."""
    layers = [f"layer{i:02d}" for i in range(24)]
    colours = group_colours(({"depth": "36", "layer": layer} for layer in layers), AXES, layers)
    assert len(set(colours.values())) == 24
    assert cie76(list(colours.values())).min() > 20
    assert cie76([layer_colour(name) for name in CANONICAL[:24]]).min() < 10  # why the view has its own


def test_one_depth_a_view_the_deepest_under_the_key_the_ui_opens() -> None:
    state = view_state(AXES, METRICS, reports=True, depth="36")
    assert state["searchFilter"] == f"{REPORT_FILTER} and params.depth = '36'"
    assert view_state(AXES, METRICS, depth="6")["searchFilter"] == "params.depth = '6'"
    assert share_key("36", "36") == SHARE_KEY and share_key("6", "36") == f"{SHARE_KEY}-depth-6"
    assert share_key() == SHARE_KEY


def test_a_suite_with_report_cells_shows_them_the_runs_the_leaderboard_scores() -> None:
    assert view_state(AXES, METRICS, reports=True)["searchFilter"] == REPORT_FILTER
    assert view_state(AXES, METRICS)["searchFilter"] == ""


def test_the_axes_come_right_after_the_pinned_name_and_created_columns_best_score_first() -> None:
    state = view_state(AXES, METRICS)
    params = ["params.`depth`", "params.`layer`", "params.`lr`"]  # seed: no column, a group would average it
    assert state["columnOrder"][:5] == [RUN_NAME, CREATED, *params]
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
