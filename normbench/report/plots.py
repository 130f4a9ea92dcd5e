"""Leaderboard figures: score vs depth, score vs lr (a grid, one panel per depth), val vs steps, lr sensitivity.

Every figure draws a layer in its style.py colour and marker, in one order, with the legend below the data. Means
and 95% CIs are over the seeds that did not diverge and stay within [0, 100]; diverged seeds are drawn apart (an x
on the axis floor with their count), so a failure never drags a mean line down to 0. Each `*_figure` returns the
matplotlib figure (tests read its artists); each `write_*` saves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from normbench.contracts.names import OutputFolder
from normbench.contracts.selection import DIVERGED, SCORE, SELECT
from normbench.report.stats import ACCURACY, selected_cells, selecting, t_interval
from normbench.report.style import (
    DIVERGED_COLOUR,
    DIVERGED_LABEL,
    DIVERGED_MARKER,
    DPI,
    LEGEND_FONT,
    PANEL,
    grid,
    layer_colour,
    layer_marker,
    layer_order,
    lr_text,
)

ROW = ["layer", "depth"]
DIVERGED_STEP = 8  # points between the x of two layers diverged at one place
MAX_LR_LABELS = 6  # more lr tick labels than this collide in a 4-inch panel: every other one is labelled
MAX_LAYERS_PER_PANEL = 8  # more curves than this tangle in one panel: one depth then gets a panel per layer


def seed_summary(cells: pd.DataFrame, keys: list[str], value: str = SCORE) -> pd.DataFrame:
    """Per `keys`: n (seeds), diverged (how many), and mean/low/high of `value` (default `score`, test top-1) over
    the seeds that did not diverge (t interval clipped to [0, 100]; NaN where every seed diverged)."""
    rows = []
    for key, group in cells.groupby(keys, sort=True, dropna=False):
        ok = group[group["status"] != DIVERGED][value]
        mean, low, high = t_interval(ok, bounds=ACCURACY)
        rows.append({**dict(zip(keys, key, strict=True)), "n": len(group), "diverged": len(group) - len(ok),
                     "mean": mean, "low": low, "high": high})
    return pd.DataFrame(rows, columns=[*keys, "n", "diverged", "mean", "low", "high"])


def _yerr(frame: pd.DataFrame) -> np.ndarray:
    """(2, N) distances to the CI ends, the ends clipped to [0, 100]; 0 where there is no interval (one seed)."""
    mean = frame["mean"].to_numpy(dtype=float)
    low = np.clip(frame["low"].fillna(frame["mean"]).to_numpy(dtype=float), *ACCURACY)
    high = np.clip(frame["high"].fillna(frame["mean"]).to_numpy(dtype=float), *ACCURACY)
    return np.stack([np.clip(mean - low, 0, None), np.clip(high - mean, 0, None)])


def _offset(i: int, layers: int) -> float:
    """Layer i's place in [-0.5, 0.5] around a shared x, so error bars at one x stay apart."""
    return (i - (layers - 1) / 2) / max(1, layers)


def _draw(ax: Any, x: np.ndarray, rows: pd.DataFrame, layer: str, floor: dict[float, int],
          at: np.ndarray | None = None, bottom: float = 0.0) -> None:
    """One layer's mean line with its CI, and its diverged seeds apart: an x on the axis floor at `at` (default
    `x`), their count beside it; `floor` counts the x already drawn at each place, so the next one stacks above."""
    from matplotlib.transforms import offset_copy

    colour = layer_colour(layer)
    ax.errorbar(x, rows["mean"].to_numpy(dtype=float), yerr=_yerr(rows), capsize=3, label=layer, color=colour,
                marker=layer_marker(layer), markersize=5)
    failed = rows["diverged"].to_numpy() > 0
    places = (x if at is None else at)[failed]
    for place, count in zip(places, rows["diverged"].to_numpy()[failed], strict=True):
        level = floor.get(place, 0)
        floor[place] = level + 1
        lifted = offset_copy(ax.transData, fig=ax.figure, y=DIVERGED_STEP * level, units="points")
        # clip_on=False: the lowest x sits on the axis floor (`bottom`) without stretching the axis
        ax.plot([place], [bottom], DIVERGED_MARKER, color=colour, markersize=6, markeredgewidth=1.5, clip_on=False,
                zorder=5, transform=lifted, gid=f"diverged:{layer}")
        ax.annotate(str(count), (place, bottom), xycoords=lifted, xytext=(5, 0), textcoords="offset points",
                    va="center", fontsize=7, color=colour, annotation_clip=False)


def _legend(fig: Any, layers: Sequence[str], *, diverged: bool = False, labels: dict[str, str] | None = None,
            bars: bool = False) -> None:
    """One legend under the whole figure, built from the style (not from whichever panel drew what)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    labels = labels or {}
    handles = [Patch(color=layer_colour(layer), label=labels.get(layer, layer)) if bars else
               Line2D([], [], color=layer_colour(layer), marker=layer_marker(layer), label=labels.get(layer, layer))
               for layer in layers]
    if diverged:
        handles.append(Line2D([], [], linestyle="", marker=DIVERGED_MARKER, color=DIVERGED_COLOUR,
                              markeredgewidth=1.5, label=DIVERGED_LABEL))
    ncol = min(len(handles), 4)
    fig.legend(handles=_row_major(handles, ncol), loc="outside lower center", ncol=ncol, fontsize=LEGEND_FONT,
               frameon=False)


def _row_major(handles: list[Any], ncol: int) -> list[Any]:
    """`handles` reordered so that matplotlib, which fills a legend column by column, shows them row by row."""
    rows, long_cols = divmod(len(handles), ncol)
    per_col = [rows + 1] * long_cols + [rows] * (ncol - long_cols)  # as matplotlib.legend splits them
    return [handles[r * ncol + c] for c in range(ncol) for r in range(per_col[c])]


def accuracy_limits(frames: Sequence[pd.DataFrame], references: dict[str, float] | None = None) -> tuple[float, float]:
    """A y range fit to the data (means and CI ends of `frames`) and the reference lines near it, on 5-point
    steps within [0, 100]: rows between 82 and 97 are read on 80-100, not squeezed into a 0-100 axis. A reference far
    below the data (chance at 10% under rows at 80%+) is named in the title instead of stretching the axis."""
    values = np.concatenate([f[c].to_numpy(dtype=float) for f in frames for c in ("mean", "low", "high") if c in f]
                            or [np.array([])])
    values = values[np.isfinite(values)]
    if not len(values):
        return ACCURACY
    low, high = float(values.min()), float(values.max())
    near = [v for v in (references or {}).values() if low - 15 <= v <= 100]
    low, high = min([low, *near]), max([high, *near])
    return max(0.0, 5 * np.floor((low - 2) / 5)), min(100.0, 5 * np.ceil((high + 2) / 5))


def draw_references(ax: Any, references: dict[str, float] | None) -> list[str]:
    """Dashed grey lines for the references within the axis (chance, the data's ceiling), labelled at the right;
    returns the names of those outside it, for the title."""
    outside = []
    bottom, top = ax.get_ylim()
    for name, value in (references or {}).items():
        if not bottom <= value <= top:
            outside.append(f"{name} {value:.1f}%")
            continue
        ax.axhline(value, color="0.45", linestyle="--", linewidth=0.9, zorder=1)
        ax.annotate(f"{name} {value:.1f}%", (1.0, value), xycoords=("axes fraction", "data"), xytext=(-2, 2),
                    textcoords="offset points", ha="right", va="bottom", fontsize=7, color="0.35")
    return outside


def _outside_text(outside: list[str]) -> str:
    return f"; off the axis: {', '.join(outside)}" if outside else ""


def depth_figure(cells: pd.DataFrame, selected: pd.DataFrame, *, dataset: str, epochs: str,
                 metric: str = "test top-1 (%)", order: Sequence[str] | None = None,
                 references: dict[str, float] | None = None) -> Any:
    """Each layer's score against depth at its val-selected lr (the seeds that score it); with one depth, the
    layers ranked side by side instead (ranking_figure)."""
    plt = _pyplot()
    summary = seed_summary(selected_cells(cells, selected, ROW), ROW)
    layers = layer_order(summary["layer"], order)
    depths = sorted(summary["depth"].unique())
    if len(depths) == 1:  # one x for 19 layers tells them apart by colour alone: give each its own, named
        return ranking_figure(summary, dataset=dataset, epochs=epochs, metric=metric, references=references)
    gap = min((b - a for a, b in zip(depths, depths[1:], strict=False)), default=1)
    fig, ax = plt.subplots(figsize=(6.5, 4.4), layout="constrained")
    ax.set_ylim(*accuracy_limits([summary], references))
    outside = draw_references(ax, references)
    floor: dict[float, int] = {}
    for i, layer in enumerate(layers):
        rows = summary[summary["layer"] == layer].sort_values("depth")
        at = rows["depth"].to_numpy(dtype=float)
        _draw(ax, at + 0.1 * gap * _offset(i, len(layers)), rows, layer, floor, at, bottom=ax.get_ylim()[0])
    ax.set_xticks(depths, [f"{d:g}" for d in depths])
    ax.set(xlabel="depth", ylabel=metric)
    ax.set_title(f"{dataset}, {epochs} epoch(s): {metric} at the val-selected lr\n"
                 f"mean over the seeds that did not diverge, 95% CI{_outside_text(outside)}", fontsize=10)
    _legend(fig, layers, diverged=bool(summary["diverged"].any()))
    return fig


def ranking_figure(summary: pd.DataFrame, *, dataset: str, epochs: str, metric: str,
                   references: dict[str, float] | None = None) -> Any:
    """One depth's layers side by side, each named under its point in its colour, in the leaderboard's order: by
    the score with a diverged seed at 0 (the points show the mean over the seeds that did not diverge, their
    diverged seeds drawn apart). A suite of one depth has no depth axis to draw."""
    scored = summary["mean"].fillna(0.0) * (summary["n"] - summary["diverged"]) / summary["n"]
    ranked = summary.assign(_score=scored).sort_values(["_score", "layer"], ascending=[False, True],
                                                       ignore_index=True)
    fig, ax = _pyplot().subplots(figsize=(max(6.5, 1.5 + 0.4 * len(ranked)), 4.4), layout="constrained")
    ax.set_ylim(*accuracy_limits([ranked], references))
    outside = draw_references(ax, references)
    floor: dict[float, int] = {}
    for x, layer in enumerate(ranked["layer"]):
        _draw(ax, np.array([float(x)]), ranked.iloc[[x]], layer, floor, bottom=ax.get_ylim()[0])
    ax.set_xticks(range(len(ranked)), ranked["layer"], rotation=45, ha="right", fontsize=8)
    for label, layer in zip(ax.get_xticklabels(), ranked["layer"], strict=True):
        label.set_color(layer_colour(layer))
    ax.set_xlim(-0.7, len(ranked) - 0.3)
    ax.set(ylabel=metric)
    ax.set_title(f"{dataset}, depth {ranked['depth'].iloc[0]:g}, {epochs} epoch(s): {metric} at the val-selected lr\n"
                 f"mean over the seeds that did not diverge, 95% CI{_outside_text(outside)}", fontsize=10)
    if ranked["diverged"].any():
        _legend(fig, [], diverged=True)
    return fig


def lr_figure(cells: pd.DataFrame, *, dataset: str, epochs: str, metric: str = "val top-1 (%)",
              order: Sequence[str] | None = None, references: dict[str, float] | None = None,
              baseline: str | None = "layernorm") -> Any:
    """Val top-1 (what chooses the lr) against lr, one panel per depth in a grid of at most 3 columns, over the
    selection seeds."""
    plt = _pyplot()
    summary = seed_summary(selecting(cells), [*ROW, "lr"], value=SELECT)
    limits = accuracy_limits([summary], references)
    layers = layer_order(summary["layer"], order)
    depths = sorted(summary["depth"].unique())
    lrs = sorted(summary["lr"].unique())
    if len(depths) == 1 and len(layers) > MAX_LAYERS_PER_PANEL:
        return _lr_panels_per_layer(summary, layers, lrs, limits, dataset=dataset, epochs=epochs, metric=metric,
                                   references=references, baseline=baseline)
    rows, cols = grid(len(depths))
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL[0] * cols, PANEL[1] * rows + 1.4), squeeze=False,
                             sharey=True, layout="constrained")
    for j, (ax, depth) in enumerate(zip(axes.ravel(), depths, strict=False)):
        at_depth, floor = summary[summary["depth"] == depth], {}
        for i, layer in enumerate(layers):
            mine = at_depth[at_depth["layer"] == layer].sort_values("lr")
            at = mine["lr"].to_numpy(dtype=float)
            if len(mine):
                _draw(ax, at * 1.03 ** _offset(i, len(layers)), mine, layer, floor, at, bottom=limits[0])
        ax.set(xscale="log", ylim=limits, xlim=(lrs[0] / 1.6, lrs[-1] * 1.6))  # one lr: no zoom onto the dodge
        outside = draw_references(ax, references)
        ax.set_title(f"depth {depth:g}", fontsize=10)
        _lr_ticks(ax, lrs)
        if j + cols >= len(depths):  # the lowest panel of its column
            ax.set_xlabel("lr")
    for ax in axes.ravel()[len(depths):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(metric)
    fig.suptitle(f"{dataset}, {epochs} epoch(s): {metric} vs lr (what chooses each row's lr)\nmean over the "
                 f"selection seeds that did not diverge, 95% CI{_outside_text(outside)}", fontsize=10)
    _legend(fig, layers, diverged=bool(summary["diverged"].any()))
    return fig


def _lr_panels_per_layer(summary: pd.DataFrame, layers: list[str], lrs: list[float], limits: tuple[float, float], *,
                         dataset: str, epochs: str, metric: str, references: dict[str, float] | None,
                         baseline: str | None) -> Any:
    """One depth, many layers: a small panel per layer (one axis would tangle their curves), each with the
    baseline's curve in grey behind it, so each panel reads as "where this layer trains, next to the baseline"."""
    rows, cols = grid(len(layers), max_cols=5)
    fig, axes = _pyplot().subplots(rows, cols, figsize=(2.3 * cols, 1.9 * rows + 1.0), squeeze=False, sharex=True,
                                   sharey=True, layout="constrained")
    behind = summary[summary["layer"] == baseline].sort_values("lr")
    for ax, layer in zip(axes.ravel(), layers, strict=False):
        if layer != baseline and len(behind):
            ax.plot(behind["lr"], behind["mean"], color="0.7", linewidth=1.2, zorder=1)
        mine = summary[summary["layer"] == layer].sort_values("lr")
        _draw(ax, mine["lr"].to_numpy(dtype=float), mine, layer, {}, bottom=limits[0])
        ax.set(xscale="log", ylim=limits, xlim=(lrs[0] / 1.6, lrs[-1] * 1.6))
        for value in (references or {}).values():  # unlabelled here: the title names them
            if limits[0] <= value <= limits[1]:
                ax.axhline(value, color="0.45", linestyle="--", linewidth=0.7, zorder=1)
        ax.set_title(layer, fontsize=9, color=layer_colour(layer))
        _lr_ticks(ax, lrs, most=3)
    for ax in axes.ravel()[len(layers):]:
        ax.set_visible(False)
    for ax in axes.ravel()[max(0, len(layers) - cols):len(layers)]:  # sharex labels only the grid's last row:
        ax.tick_params(labelbottom=True)  # a column whose last panel is hidden needs its lowest one labelled
    fig.supxlabel("lr", fontsize=9)
    fig.supylabel(metric, fontsize=9)
    drawn = {name: v for name, v in (references or {}).items() if limits[0] <= v <= limits[1]}
    outside = [f"{name} {v:.1f}%" for name, v in (references or {}).items() if name not in drawn]
    keys = [f"grey: {baseline}"] if len(behind) else []
    keys += [f"dashed: {', '.join(f'{name} {v:.1f}%' for name, v in drawn.items())}"] if drawn else []
    keys += [f"off the axis: {', '.join(outside)}"] if outside else []
    keys += [DIVERGED_LABEL] if summary["diverged"].any() else []  # in the title: a legend would sit on "lr"
    fig.suptitle(f"{dataset}, depth {summary['depth'].iloc[0]:g}, {epochs} epoch(s): {metric} vs lr, mean over the "
                 f"selection seeds that did not diverge, 95% CI\n{'; '.join(keys)}", fontsize=10)
    return fig


def _lr_ticks(ax: Any, lrs: list[float], most: int = MAX_LR_LABELS) -> None:
    """Ticks at the lrs tried, printed as the tables print them (3 significant digits); every other one is
    labelled when more than `most` would collide."""
    from matplotlib.ticker import NullLocator

    shown = lrs if len(lrs) <= most else lrs[::2]
    ax.set_xticks(shown, [lr_text(lr) for lr in shown], rotation=45, ha="right", fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())


def write_plots(cells: pd.DataFrame, selected: pd.DataFrame, out_dir: Path, *, dataset: str, epochs: str,
                metric: str = "test top-1 (%)", order: Sequence[str] | None = None,
                references: dict[str, float] | None = None, baseline: str | None = "layernorm") -> list[Path]:
    """accuracy_vs_depth.png (each layer at its val-selected lr; one depth: the layers ranked) and
    accuracy_vs_lr.png (one panel per depth; one depth of many layers: one panel per layer).

    Args:
        cells: Cells with `select`/`score` (normbench.contracts.selection.add_scores).
        selected: `select_lr(cells, ["layer", "depth"])`.
        dataset, epochs: Named in the titles, e.g. "digits", "10".
        metric: The y axis, the leaderboard's score.
        order: The suite's layers (`Suite.layers()`): the figures' order; None sorts them.
        references: Dashed lines, e.g. {"chance": 10.0, "logistic regression": 96.7}.
        baseline: The layer drawn behind every other one when one depth gets a panel per layer.
    """
    text = {"dataset": dataset, "epochs": epochs, "order": order, "references": references}
    return [_save(depth_figure(cells, selected, metric=metric, **text), out_dir / OutputFolder.ACCURACY_VS_DEPTH),
            _save(lr_figure(cells, baseline=baseline, **text), out_dir / OutputFolder.ACCURACY_VS_LR)]


def step_figure(history: pd.DataFrame, at_selected: pd.DataFrame, *, dataset: str,
                order: Sequence[str] | None = None, references: dict[str, float] | None = None) -> Any | None:
    """Val top-1 against optimizer steps for each layer at its selected lr, at the deepest depth (and largest
    budget), mean over the reporting seeds with their min-max band; None without curves."""
    if history.empty or at_selected.empty:
        return None
    deepest = at_selected[at_selected["depth"] == at_selected["depth"].max()]
    if "epochs" in deepest and deepest["epochs"].notna().any():  # an epochs axis; the 2x budget cells' column is
        deepest = deepest[deepest["epochs"] == deepest["epochs"].max()]  # empty (NaN) on the cells a row reports
    curves = history[history["cell_id"].isin(set(deepest["cell_id"]))].merge(
        deepest[["cell_id", "layer"]], on="cell_id", suffixes=("_history", ""))
    curves = curves.dropna(subset=["val_top1", "step"])
    if curves.empty:
        return None
    layers = layer_order(curves["layer"], order)
    fig, ax = _pyplot().subplots(figsize=(6.5, 4.4), layout="constrained")
    for layer in layers:
        by_step = curves[curves["layer"] == layer].groupby("step")["val_top1"]
        mean, colour = by_step.mean(), layer_colour(layer)
        ax.plot(mean.index, mean.to_numpy(), color=colour, marker=layer_marker(layer), markersize=3, label=layer)
        ax.fill_between(mean.index, by_step.min().to_numpy(), by_step.max().to_numpy(), color=colour, alpha=0.15)
    # the curves start at chance: the full range, with the references drawn
    ax.set(xlabel="optimizer steps", ylabel="val top-1 (%)", ylim=ACCURACY)
    draw_references(ax, references)
    ax.set_title(f"{dataset}, depth {int(deepest['depth'].max())}: val top-1 vs steps at each layer's selected lr"
                 "\n(mean over the reporting seeds, band = min-max)", fontsize=10)
    seeds = curves.groupby("layer")["cell_id"].nunique()
    _legend(fig, layers, labels={layer: f"{layer} ({seeds[layer]} seeds)" for layer in layers})
    return fig


def write_accuracy_vs_step(history: pd.DataFrame, at_selected: pd.DataFrame, out_dir: Path, *,
                           dataset: str, order: Sequence[str] | None = None,
                           references: dict[str, float] | None = None) -> Path | None:
    """accuracy_vs_step.png (step_figure): learning speed and final accuracy in one picture; a curve that starts
    late but ends high crosses the others."""
    fig = step_figure(history, at_selected, dataset=dataset, order=order, references=references)
    return _save_or_clear(fig, out_dir / OutputFolder.ACCURACY_VS_STEP)


def sensitivity_figure(selected: pd.DataFrame, *, dataset: str, table_keys: list[str],
                       order: Sequence[str] | None = None) -> Any | None:
    """Each layer's lr sensitivity (points lost on average across the common lrs; lower is more robust) per table
    (depth, budget), grouped bars; None without sensitivities."""
    if "sensitivity" not in selected or selected["sensitivity"].isna().all():
        return None
    tables = selected[table_keys].drop_duplicates().sort_values(table_keys).to_dict("records")
    layers = layer_order(selected["layer"], order)
    width = 0.8 / max(1, len(layers))
    fig, ax = _pyplot().subplots(figsize=(max(6.0, 1.2 * len(tables) + 3), 4.4), layout="constrained")
    for i, layer in enumerate(layers):
        values = []
        for table in tables:
            row = selected[(selected["layer"] == layer) & np.logical_and.reduce(
                [selected[k] == v for k, v in table.items()])]
            values.append(float(row["sensitivity"].iloc[0]) if len(row) else np.nan)
        ax.bar(np.arange(len(tables)) + _offset(i, len(layers)) * 0.8, values, width, label=layer,
               color=layer_colour(layer))
    ax.set_xticks(np.arange(len(tables)), [", ".join(f"{k} {v}" for k, v in t.items()) for t in tables])
    ax.set_ylabel("lr sensitivity (points, lower = more robust)")
    ax.set_title(f"{dataset}: mean over the common lrs of (best - score), a diverged cell at chance", fontsize=10)
    _legend(fig, layers, bars=True)
    return fig


def write_lr_sensitivity(selected: pd.DataFrame, out_dir: Path, *, dataset: str, table_keys: list[str],
                         order: Sequence[str] | None = None) -> Path | None:
    """lr_sensitivity.png (sensitivity_figure)."""
    fig = sensitivity_figure(selected, dataset=dataset, table_keys=table_keys, order=order)
    return _save_or_clear(fig, out_dir / OutputFolder.LR_SENSITIVITY)


def lr_depth_figure(selected: pd.DataFrame, cells: pd.DataFrame, *, dataset: str,
                    order: Sequence[str] | None = None) -> Any | None:
    """Does the best lr move with depth? Each layer's val-selected lr against depth (log scale), a thin bar for the
    span of lrs its selection seeds tried there and a thick one for its lr window; None with one depth."""
    depths = sorted(selected["depth"].unique())
    if len(depths) < 2:
        return None
    tried = selecting(cells).groupby(ROW)["lr"].agg(["min", "max"])
    layers = layer_order(selected["layer"], order)
    gap = min(b - a for a, b in zip(depths, depths[1:], strict=False))
    fig, ax = _pyplot().subplots(figsize=(6.5, 4.4), layout="constrained")
    for i, layer in enumerate(layers):
        rows = selected[selected["layer"] == layer].sort_values("depth")
        x = rows["depth"].to_numpy(dtype=float) + 0.12 * gap * _offset(i, len(layers))
        colour = layer_colour(layer)
        span = np.array([tried.loc[(layer, d)].to_numpy(dtype=float) for d in rows["depth"]])
        ax.vlines(x, span[:, 0], span[:, 1], color=colour, linewidth=0.8, alpha=0.6)
        ax.vlines(x, rows["window_low"], rows["window_high"], color=colour, linewidth=3.0, alpha=0.45)
        ax.plot(x, rows["lr"], color=colour, marker=layer_marker(layer), markersize=5, label=layer)
    ax.set_yscale("log")
    ax.set_xticks(depths, [f"{d:g}" for d in depths])
    ax.set(xlabel="depth", ylabel="val-selected lr")
    ax.set_title(f"{dataset}: the val-selected lr against depth\nthin bar = lrs tried, thick bar = lr window "
                 "(lrs within the selected lr's val CI)", fontsize=10)
    _legend(fig, layers)
    return fig


def write_lr_vs_depth(selected: pd.DataFrame, cells: pd.DataFrame, out_dir: Path, *, dataset: str,
                      order: Sequence[str] | None = None) -> Path | None:
    """lr_vs_depth.png (lr_depth_figure)."""
    fig = lr_depth_figure(selected, cells, dataset=dataset, order=order)
    return _save_or_clear(fig, out_dir / OutputFolder.LR_VS_DEPTH)


def _pyplot():  # matplotlib.pyplot, imported only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_or_clear(fig: Any | None, path: Path) -> Path | None:
    """A figure the folder's cells can draw is saved; one they cannot (one lr, one depth, no history) is removed if
    an earlier leaderboard left it, so the folder never shows a figure its leaderboard no longer links."""
    if fig is not None:
        return _save(fig, path)
    for stale in (path, path.with_suffix(".svg")):
        stale.unlink(missing_ok=True)
    return None


def _save(fig: Any, path: Path) -> Path:
    """save_figure, then the figure is closed."""
    save_figure(fig, path)
    _pyplot().close(fig)
    return path


def save_figure(fig: Any, path: Path) -> Path:
    """The PNG at DPI (tight: the legend below and titles are kept whole) and its SVG twin for papers; the SVG
    carries no date and fixed ids, so an unchanged figure rewrites the same file."""
    import matplotlib

    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    with matplotlib.rc_context({"svg.hashsalt": "normbench", "svg.fonttype": "none"}):
        fig.savefig(path.with_suffix(".svg"), bbox_inches="tight", metadata={"Date": None})
    return path
