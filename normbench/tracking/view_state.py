"""The suite's shared view in MLflow's UI: what the runs table and the chart view show when `normbench ui` opens.
MLflow 3's experiment page applies the JSON in the experiment tag `mlflow.sharedViewState.<key>` when its URL carries
`viewStateShareKey=<key>`: its search facets and UI state, less runsHidden, runsPinned, runsExpanded and
runsVisibilityMap (read from the installed UI bundle, MLflow 3.17; tests/tracking/test_view_state.py checks every key
against it). What we set, and why:
- runs grouped by `depth` and `layer`: a row each, charts drawing each group's mean with a min-max band in its
  layer's colour of the leaderboard's figures (`group_colours`; ui_app.py puts them where MLflow's UI keeps group
  colours, run_record.py gives each run its `mlflow.runColor`); every run shown, not MLflow's first 10.
- a suite with report seeds shows its report cells: the runs the leaderboard scores, at each row's chosen lr, so a
  group's mean `test_top1` is its score. Clearing the search box shows every cell.
- the axes right after the pinned Run Name and Created columns, then the scores, best first (sorting by a metric
  also lists the cells flat instead of nested under the `leaderboard` run).
- charts: MLflow sorts generated sections by name and puts "Model metrics" last unless the sections come in order
  with `isAccordionReordered`. We give Model metrics first (val_top1, train_loss leading), then the telemetry
  sections (first, middle, last block); a metric not listed gets its chart from MLflow, at the end of its section.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from normbench.tracking.run_record import POSITIONS, TELEMETRY_PREFIX

SHARE_KEY = "normbench-comparison"
SHARE_TAG = f"mlflow.sharedViewState.{SHARE_KEY}"
# metrics: test top-1 (the leaderboard's score) and val top-1 (what selects), final epoch, 0 when diverged
SCORE_COLUMNS = ("test_top1", "val_top1_final", "diverged")
GROUP_AXES = ("depth", "layer")
REPORT_FILTER = "tags.role = 'report' and attributes.status = 'FINISHED'"
# Model metrics' charts, in this order: per-epoch curves (lines) then the cell's summary (step 0: bars)
LINES = ("val_top1", "train_loss", "scheduled_lr", "grad_norm", "images_per_sec")
BARS = ("test_top1", "val_top1_final", "best_val_top1", "diverged", "epochs_run", "cell_seconds",
        "images_per_sec_mean", "params")
MODEL_SECTION, SYSTEM_SECTION = "Model metrics", "System metrics"  # MLflow's names for its unprefixed sections
# two wide, tall charts a row (MLflow: 3 a row, 360 px): room for a legend line per (depth, layer) under the curves
MODEL_LAYOUT = {"columns": 2, "cardHeight": 640}
RUN_NAME, CREATED, DURATION = "attributes.`Run Name`", "runDateAndNestInfo", "duration"  # the table's column ids


def column(kind: str, name: str) -> str:
    """MLflow UI's column key, e.g. params.`layer`."""
    return f"{kind}.`{name}`"


def view_state(axes: list[str], metric_keys: Iterable[str] = (), reports: bool = False,
               groups: Iterable[str] = ()) -> dict[str, Any]:
    """The shared view for a suite with these axes (params) whose runs logged `metric_keys` (all of LINES and BARS
    when not given): runs table, grouping, and chart sections, best score first; with `reports` (the suite has
    report cells) only those; the `groups` (MLflow's group ids, `group_colours`' keys) collapsed: a row each."""
    params = [column("params", a) for a in axes]
    scores = [column("metrics", m) for m in SCORE_COLUMNS]
    grouped = [a for a in GROUP_AXES if a in axes]
    return {
        "orderByKey": column("metrics", SCORE_COLUMNS[0]), "orderByAsc": False,
        "searchFilter": REPORT_FILTER if reports else "",
        "lifecycleFilter": "Active", "startTime": "ALL",
        "selectedColumns": [RUN_NAME, *params, *scores],
        "columnOrder": [RUN_NAME, CREATED, *params, *scores, DURATION],
        # wide enough for a group's name (`Group: depth: 36, layer: layerscale`) and a mean (`96.5975 (average)`)
        "columnWidths": {RUN_NAME: 330, CREATED: 135, **{m: 140 for m in scores},
                         **{p: {"layer": 140, "lr": 90}.get(a, 65) for a, p in zip(axes, params, strict=True)}},
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": ({"aggregateFunction": "average",
                     "groupByKeys": [{"mode": "param", "groupByData": a} for a in grouped]} if grouped else None),
        "groupsExpanded": dict.fromkeys(groups, False), "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
        **charts(metric_keys),
        "viewMaximized": False, "runListHidden": False,
    }


def group_colours(runs_params: Iterable[dict[str, str]], axes: list[str]) -> dict[str, str]:
    """MLflow UI's group id (`param.depth.12,param.layer.rezero`, as its runs table builds it from `groupBy`) ->
    the layer's colour in the leaderboard's figures, for every group these runs' params make."""
    from normbench.report.style import layer_colour

    grouped = [a for a in GROUP_AXES if a in axes]
    colours = {}
    for params in runs_params:
        if "layer" in grouped and all(a in params for a in grouped):
            colours[",".join(f"param.{a}.{params[a]}" for a in grouped)] = layer_colour(params["layer"])
    return colours


def charts(metric_keys: Iterable[str] = ()) -> dict[str, Any]:
    """compareRunSections and compareRunCharts: Model metrics (val_top1, train_loss first), the telemetry sections
    (first, middle, last block), System metrics; `isAccordionReordered` so MLflow keeps that order."""
    keys = set(metric_keys) or set(LINES + BARS)
    order = {f"{TELEMETRY_PREFIX}{p}": i for i, p in enumerate(POSITIONS)}  # first, middle, last; others by name
    telemetry = sorted({k.rsplit("/", 1)[0] for k in keys if k.startswith(TELEMETRY_PREFIX)},
                       key=lambda s: (order.get(s, len(order)), s))
    names = [MODEL_SECTION, *telemetry, SYSTEM_SECTION]
    sections = [{"uuid": f"normbench-section-{i}", "name": n, "display": True, "isReordered": n == MODEL_SECTION,
                 "deleted": False, "isGenerated": True, **(MODEL_LAYOUT if n == MODEL_SECTION else {})}
                for i, n in enumerate(names)]
    model = sections[0]["uuid"]
    cards = [_card("LINE", k, model) for k in LINES if k in keys] + [_card("BAR", k, model) for k in BARS if k in keys]
    return {"compareRunSections": sections, "compareRunCharts": cards, "isAccordionReordered": True}


def _card(kind: str, key: str, section: str) -> dict[str, Any]:
    # the fields of MLflow's RunsChartsCardConfig (its `new` fills them the same way); the uuid names the metric
    card = {"uuid": f"normbench-chart-{key}", "type": kind, "runsCountToCompare": 10, "metricSectionId": section,
            "deleted": False, "isGenerated": True, "displayName": key, "metricKey": key}
    if kind == "LINE":
        card.update(lineSmoothness=0, xAxisScaleType="linear", scaleType="linear", range={}, xAxisKey="step",
                    selectedXAxisMetricKey="", yAxisKey="metric", yAxisExpressions=[], ignoreOutliers=False,
                    useGlobalXaxisKey=True, useGlobalLineSmoothing=True)
    return card
