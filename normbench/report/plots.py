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
