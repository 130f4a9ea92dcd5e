"""The suite's shared view in MLflow's UI, what `normbench ui` opens on. MLflow 3 applies the JSON in the experiment tag
`mlflow.sharedViewState.<key>` if the URL has `viewStateShareKey=<key>`: search facets and UI state, less runsHidden,
runsPinned, runsExpanded, runsVisibilityMap (MLflow 3.17's UI bundle; tests/tracking/test_view_state.py checks). Why:
- runs grouped by `depth` and `layer`, a row each, charts drawing each group's mean with a min-max band in its layer's
  leaderboard colour (`group_colours`, placed by ui_app.py); every run shown, not MLflow's first 10.
- with report seeds, only report cells (scored runs at each row's chosen lr): a group's mean `test_top1` is its score.
- sorting by a score, best first, also lists cells flat instead of nested under the `leaderboard` run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from normbench.tracking.run_record import POSITIONS, TELEMETRY_PREFIX

SHARE_KEY = "normbench-comparison"
SHARE_TAG = f"mlflow.sharedViewState.{SHARE_KEY}"
SCORE_COLUMNS = ("test_top1", "val_top1_final", "diverged")  # final metrics, see run_record.py
GROUP_AXES = ("depth", "layer")
REPORT_FILTER = "tags.role = 'report' and attributes.status = 'FINISHED'"
# Model metrics' charts in order: per-epoch curves (lines), the cell's summary (step 0: bars); MLflow adds the rest
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
    """The view for `axes` and `metric_keys` (default LINES+BARS); `reports`: report cells only; `groups` collapsed."""
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
    """MLflow UI's group id (`param.depth.12,param.layer.rezero`, from `groupBy`) -> its layer's leaderboard colour."""
    from normbench.report.style import layer_colour

    grouped = [a for a in GROUP_AXES if a in axes]
    colours = {}
    for params in runs_params:
        if "layer" in grouped and all(a in params for a in grouped):
            colours[",".join(f"param.{a}.{params[a]}" for a in grouped)] = layer_colour(params["layer"])
    return colours


def charts(metric_keys: Iterable[str] = ()) -> dict[str, Any]:
    """compareRunSections/compareRunCharts: Model metrics (val_top1, train_loss first), telemetry (first, middle, last
    block), System metrics; `isAccordionReordered`, or MLflow sorts generated sections by name, Model metrics last."""
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
