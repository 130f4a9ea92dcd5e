"""The suite's shared view in MLflow's UI, what `normbench ui` opens on. MLflow 3 applies the JSON in the experiment tag
`mlflow.sharedViewState.<key>` if the URL has `viewStateShareKey=<key>`: search facets and UI state, less runsHidden,
runsPinned, runsExpanded, runsVisibilityMap (MLflow 3.17's UI bundle; tests/tracking/test_view_state.py checks). Why:
- runs grouped by `depth` and `layer`, a row each, charts drawing each group's mean with a min-max band in its layer's
  colour (`group_colours`, placed by ui_app.py); every run shown, not MLflow's first 10.
- one depth a view (`share_key`): the deepest opens, each other depth is its own link; rows of several depths mixed
  read as one ranking they are not.
- its own palette (VIEW_COLOURS), not the figures': a figure tells layers apart by marker too, a chart legend and a
  table row by colour alone, so the view's rows take colours chosen to stay apart (CIE76 deltaE > 20 for 24 rows).
- with report seeds, only report cells at each row's selected lr (the scored runs): a group's mean `test_top1` is its
  score, also where a row's lr moved after report cells trained at another.
- sorting by a score, best first, also lists cells flat instead of nested under the `leaderboard` run.
- no `seed` column: a group row would show the seeds' mean (101.5); each run's name ends with its seed (`s100`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from normbench.tracking.run_record import POSITIONS, TELEMETRY_PREFIX
from normbench.tracking.selected_lr import AT_SELECTED_TAG, YES

SHARE_KEY = "normbench-comparison"  # the view `normbench ui` opens: the deepest depth
SHARE_TAG = f"mlflow.sharedViewState.{SHARE_KEY}"
UNGROUPED_COLUMNS = ("seed",)  # axes whose mean over a group's runs means nothing: left out of the table
# 24 colours in order, each the sRGB colour (channels in steps of 17, CIELAB lightness 30-75: readable on white)
# farthest in CIEDE2000 from those before it, from tab10's blue, orange, green and red on: all 24 stay >= 17 apart
# in CIEDE2000 (>= 23 in CIE76; 2.3 is just noticeable), so close hues (two blues) are not picked twice
VIEW_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#ff88ff", "#880099", "#665522", "#00cccc", "#887788",
                "#006655", "#bbaa00", "#ff9999", "#ee0088", "#99aaff", "#999988", "#773344", "#444466", "#9955ff",
                "#00bbff", "#773311", "#336600", "#aa7711", "#0044dd", "#aa7766")
SCORE_COLUMNS = ("test_top1", "val_top1_final", "diverged")  # final metrics, see run_record.py
GROUP_AXES = ("depth", "layer")
# report cells at their row's selected lr (selected_lr.py): a row's mean is then its leaderboard score
REPORT_FILTER = f"tags.role = 'report' and tags.{AT_SELECTED_TAG} = '{YES}' and attributes.status = 'FINISHED'"
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


def share_key(depth: str | None = None, deepest: str | None = None) -> str:
    """The shared view's key of one depth: SHARE_KEY for the deepest (the one `normbench ui` opens), else its own."""
    return SHARE_KEY if depth is None or depth == deepest else f"{SHARE_KEY}-depth-{depth}"


def depth_filter(reports: bool, depth: str | None) -> str:
    """The search filter: report cells (when there are) of one depth (when given)."""
    parts = [REPORT_FILTER] if reports else []
    return " and ".join([*parts, *([f"params.depth = '{depth}'"] if depth is not None else [])])


def view_state(axes: list[str], metric_keys: Iterable[str] = (), reports: bool = False,
               groups: Iterable[str] = (), depth: str | None = None) -> dict[str, Any]:
    """The view for `axes` and `metric_keys` (default LINES+BARS); `reports`: report cells only; `groups` collapsed;
    `depth`: that depth's runs only."""
    grouped = [a for a in GROUP_AXES if a in axes]
    axes = [a for a in axes if not (grouped and a in UNGROUPED_COLUMNS)]
    params = [column("params", a) for a in axes]
    scores = [column("metrics", m) for m in SCORE_COLUMNS]
    return {
        "orderByKey": column("metrics", SCORE_COLUMNS[0]), "orderByAsc": False,
        "searchFilter": depth_filter(reports, depth),
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


def group_colours(runs_params: Iterable[dict[str, str]], axes: list[str],
                  layer_order: Iterable[str] = ()) -> dict[str, str]:
    """MLflow UI's group id (`param.depth.12,param.layer.rezero`, from `groupBy`) -> its layer's VIEW_COLOURS entry:
    the layers in `layer_order` (the suite's), then the others sorted, take the palette in turn (after 24, again
    from the start), so a layer has one colour at every depth and a depth's rows are told apart."""
    grouped = [a for a in GROUP_AXES if a in axes]
    if "layer" not in grouped:
        return {}
    runs = [p for p in runs_params if all(a in p for a in grouped)]
    present = {p["layer"] for p in runs}
    order = [*(layer for layer in dict.fromkeys(layer_order) if layer in present),
             *sorted(present - set(layer_order))]
    colour = {layer: VIEW_COLOURS[i % len(VIEW_COLOURS)] for i, layer in enumerate(order)}
    return {",".join(f"param.{a}.{p[a]}" for a in grouped): colour[p["layer"]] for p in runs}


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
