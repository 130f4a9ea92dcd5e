"""Leaderboard figures: score vs depth and score vs lr, with 95% CI error bars, titled, legends outside the data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from normbench.report.stats import per_lr
from normbench.spec.names import OutputFolder


def _yerr(frame: pd.DataFrame) -> np.ndarray:
    """(2, N) distances to the CI ends; 0 where there is no interval (one seed)."""
    low = (frame["mean"] - frame["low"]).fillna(0.0).to_numpy()
    high = (frame["high"] - frame["mean"]).fillna(0.0).to_numpy()
    return np.stack([low, high])


def write_plots(cells: pd.DataFrame, selected: pd.DataFrame, out_dir: Path, *, dataset: str, epochs: str,
                metric: str = "test top-1 (%)") -> list[Path]:
    """accuracy_vs_depth.png (each layer at its val-selected lr) and accuracy_vs_lr.png (one panel per depth).

    Args:
        cells: Cells with `select`/`score` (normbench.spec.selection.add_scores).
        selected: `select_lr(cells, ["layer", "depth"])`.
        dataset, epochs: Named in the titles, e.g. "digits", "10".
        metric: The y axis, the leaderboard's score.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    layers = sorted(selected["layer"].unique())
    depths = sorted(selected["depth"].unique())
    gap = min((b - a for a, b in zip(depths, depths[1:], strict=False)), default=1)
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for i, (layer, g) in enumerate(selected.sort_values("depth").groupby("layer")):
        dodge = (i - (len(layers) - 1) / 2) * 0.1 * gap / max(1, len(layers))  # keep the error bars apart
        ax.errorbar(g["depth"] + dodge, g["mean"], yerr=_yerr(g), marker="o", capsize=3, label=layer)
    ax.set_xticks(depths)
    ax.set_ylim(0, 100)  # accuracy is bounded; a few-seed t interval is not, and would squash the means
    ax.set(xlabel="depth", ylabel=metric,
           title=f"{dataset}, {epochs} epoch(s): {metric} at the val-selected lr\n(mean over seeds, 95% CI)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    paths.append(out_dir / OutputFolder.ACCURACY_VS_DEPTH)
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")

    curves = per_lr(cells, ["layer", "depth"])
    fig, axes = plt.subplots(1, len(depths), figsize=(3.6 * len(depths) + 1.5, 3.6), squeeze=False, sharey=True)
    for ax, depth in zip(axes[0], depths, strict=True):
        for i, (layer, g) in enumerate(curves[curves["depth"] == depth].groupby("layer")):
            dodge = 1.03 ** (i - (len(layers) - 1) / 2)
            ax.errorbar(g["lr"] * dodge, g["mean"], yerr=_yerr(g), marker="o", capsize=3, label=layer)
        ax.set(xscale="log", xlabel="lr", title=f"depth {depth}", ylim=(0, 100),
               xlim=(curves["lr"].min() / 1.6, curves["lr"].max() * 1.6))  # one lr: no zoom onto the dodge
    axes[0][0].set_ylabel(f"{metric}, seed mean, 95% CI")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.9))
    fig.suptitle(f"{dataset}, {epochs} epoch(s): {metric} vs lr (mean over seeds, 95% CI)")
    fig.tight_layout()
    paths.append(out_dir / OutputFolder.ACCURACY_VS_LR)
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close("all")
    return paths


def write_accuracy_vs_step(history: pd.DataFrame, at_selected: pd.DataFrame, out_dir: Path, *,
                           dataset: str) -> Path | None:
    """accuracy_vs_step.png: val top-1 against optimizer steps for each layer at its selected lr, at the deepest
    depth (and largest budget), mean over the reporting seeds with their min-max band. Learning speed and final
    accuracy in one picture: a curve that starts late but ends high crosses the others."""
    if history.empty or at_selected.empty:
        return None
    plt = _pyplot()

    deepest = at_selected[at_selected["depth"] == at_selected["depth"].max()]
    if "epochs" in deepest:
        deepest = deepest[deepest["epochs"] == deepest["epochs"].max()]
    curves = history[history["cell_id"].isin(set(deepest["cell_id"]))].merge(
        deepest[["cell_id", "layer"]], on="cell_id", suffixes=("_history", ""))
    curves = curves.dropna(subset=["val_top1", "step"])
    if curves.empty:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for layer, g in curves.groupby("layer", sort=True):
        by_step = g.groupby("step")["val_top1"]
        mean = by_step.mean()
        ax.plot(mean.index, mean.to_numpy(), marker=".", label=f"{layer} ({g['cell_id'].nunique()} seeds)")
        ax.fill_between(mean.index, by_step.min().to_numpy(), by_step.max().to_numpy(), alpha=0.15)
    ax.set_ylim(0, 100)
    ax.set(xlabel="optimizer steps", ylabel="val top-1 (%)",
           title=f"{dataset}, depth {int(deepest['depth'].max())}: val top-1 vs steps at each layer's selected lr"
                 "\n(mean over the reporting seeds, band = min-max)")
    return _save_with_legend(fig, ax, out_dir / OutputFolder.ACCURACY_VS_STEP)


def write_lr_sensitivity(selected: pd.DataFrame, out_dir: Path, *, dataset: str, table_keys: list[str]) -> Path | None:
    """lr_sensitivity.png: each layer's lr sensitivity (points lost on average across the common lrs; lower is more
    robust) per table (depth, budget), grouped bars."""
    if "sensitivity" not in selected or selected["sensitivity"].isna().all():
        return None
    plt = _pyplot()

    tables = selected[table_keys].drop_duplicates().sort_values(table_keys).to_dict("records")
    layers = sorted(selected["layer"].unique())
    width = 0.8 / max(1, len(layers))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(tables) + 3), 4))
    for i, layer in enumerate(layers):
        values = []
        for table in tables:
            row = selected[(selected["layer"] == layer) & np.logical_and.reduce(
                [selected[k] == v for k, v in table.items()])]
            values.append(float(row["sensitivity"].iloc[0]) if len(row) else np.nan)
        ax.bar(np.arange(len(tables)) + (i - (len(layers) - 1) / 2) * width, values, width, label=layer)
    ax.set_xticks(np.arange(len(tables)), [", ".join(f"{k} {v}" for k, v in t.items()) for t in tables])
    ax.set(ylabel="lr sensitivity (points, lower = more robust)",
           title=f"{dataset}: mean over the common lrs of (best - score), a diverged cell at chance")
    return _save_with_legend(fig, ax, out_dir / OutputFolder.LR_SENSITIVITY)


def _pyplot():  # matplotlib.pyplot, imported only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_with_legend(fig, ax, path: Path) -> Path:
    """The legend outside the data, then the file; the figure is closed."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return path
