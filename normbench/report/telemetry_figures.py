"""Telemetry in the leaderboard: why a layer fails at depth, block by block (normbench/train/telemetry.py records it).

For the suite's deepest depth and each layer at its selected lr (highest seed-mean `select`, val top-1, as the
tables choose it; `score` where a frame has no `select`): one figure per
quantity with a panel per layer (block index x training step, a heatmap), and a table of the end-of-training values
of the first, middle and last block. Everything but `telemetry_section` is pure: DataFrames in, figures and
DataFrames out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from normbench.contracts.names import OutputFolder
from normbench.contracts.selection import BUDGETS, ROLE, SCORE, SELECT, chosen_lrs
from normbench.report.plots import save_figure
from normbench.report.style import layer_colour
from normbench.report.style import layer_order as figure_order
from normbench.train.telemetry import QUANTITIES

LINEAR = {"attn_entropy"}  # shown on a linear colour scale; the other quantities span decades: log scale
TITLES = {"stream_rms": "RMS of the residual stream entering each block",
          "stream_max": "max |activation| of the stream entering each block",
          "attn_rms": "attention branch output RMS (after its gate)",
          "attn_ratio": "attention branch RMS / stream RMS",
          "mlp_rms": "MLP branch output RMS (after its gate)",
          "mlp_ratio": "MLP branch RMS / stream RMS",
          "attn_entropy": "attention entropy (nats; mean over heads and queries)",
          "grad_norm": "gradient norm of the block's parameters (before clipping)",
          "update_ratio": "update-to-weight ratio of the block's weight matrices",
          "attn_logit_max": "largest attention logit q·k/√d_h (after QK-norm; max over heads and tokens)",
          "mix_ds_error": "distance of the residual mixing matrices from doubly stochastic (max |row/column sum - 1|)"}
# Why a heatmap cell is blank at step 0 only: said under the figure, not left for the reader to guess
ZERO_INIT_UNDEFINED = "a ratio with a zero denominator: weights or gates initialised at zero, as in rezero and fixup"
ZERO_INIT_ZERO = ("a gate initialised at zero, as in rezero and fixup, keeps its branch off; a log scale cannot "
                  "show 0")


def telemetry_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """Long format: one row per (cell, step, block), the axes of `cells` beside the quantities.

    Args:
        cells: the leaderboard's cells (leaderboard.cells_frame): one row per cell; `telemetry` holds each cell's
            records (a list of {step, block, quantity: value}), missing or empty for cells that recorded none.
    Returns:
        columns cell_id, layer, depth, lr, seed, select, score, role, step, block and every quantity present; empty when
        no cell has telemetry.
    """
    if cells.empty or "telemetry" not in cells:
        return pd.DataFrame()
    axes = [c for c in ("cell_id", "layer", "depth", "lr", "seed", "select", "score", "status", ROLE) if c in cells]
    rows = [{**{a: cell[a] for a in axes}, **record}
            for _, cell in cells.iterrows() if isinstance(cell["telemetry"], list) for record in cell["telemetry"]]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    quantities = [q for q in QUANTITIES if q in frame]
    frame[quantities] = frame[quantities].astype(float)  # None (a non-finite value) -> NaN
    return frame


def best_lr_telemetry(frame: pd.DataFrame, depth: int | None = None) -> pd.DataFrame:
    """The rows of `depth` (default: the deepest) at each layer's selected lr (contracts.selection.chosen_lrs: the
    highest seed-mean `select`, val; the test score never chooses)."""
    if frame.empty:
        return frame
    depth = frame["depth"].max() if depth is None else depth
    at_depth = frame[frame["depth"] == depth]
    if ROLE in at_depth:  # chosen_lrs reads the selection cells; 2x cells (twice the steps) map nothing here
        at_depth = at_depth[at_depth[ROLE] != BUDGETS]
    return at_depth.merge(chosen_lrs(at_depth.drop_duplicates("cell_id"), ["layer"], by=_chooser(frame)),
                          on=["layer", "lr"])


def layer_order(frame: pd.DataFrame) -> list[str]:
    """Layers by the seed-mean `select` (val) at each one's selected lr (chosen_lrs), best first; `frame` is
    usually best_lr_telemetry's, one lr per layer already."""
    cells, by = frame.drop_duplicates("cell_id"), _chooser(frame)
    at_lr = cells.merge(chosen_lrs(cells, ["layer"], by=by), on=["layer", "lr"]).groupby("layer")[by].mean()
    return list(at_lr.sort_values(ascending=False, kind="stable").index)


def _chooser(frame: pd.DataFrame) -> str:
    return SELECT if SELECT in frame else SCORE


def block_maps(frame: pd.DataFrame, quantity: str, order: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    """Per layer in the figures' order (style.layer_order: the suite's `order`, else sorted), the seed mean of
    `quantity` as a (block x step) table: index blocks, columns steps."""
    return {layer: frame[frame["layer"] == layer].pivot_table(index="block", columns="step", values=quantity,
                                                               aggfunc="mean", dropna=False)
            for layer in figure_order(frame["layer"], order)}


def _steps_text(steps: Sequence[Any]) -> str:
    steps = sorted(set(steps))
    return f"step {steps[0]:g}" if len(steps) == 1 else f"steps {', '.join(f'{s:g}' for s in steps[:3])}" + (
        ", ..." if len(steps) > 3 else "")


def blank_notes(maps: dict[str, pd.DataFrame], quantity: str) -> list[str]:
    """Why cells of the heatmaps are blank, per layer: not finite (a ratio over a zero norm: weights or a gate
    initialised at zero, as in rezero and fixup, at step 0) or exactly 0 on a log scale (a branch switched off by
    its zero gate). [] when no cell is blank."""
    layers_by_note: dict[str, list[str]] = {}  # layers blank for the same reason share one line
    for layer, m in maps.items():
        values = m.to_numpy(dtype=float)
        undefined = [step for step, column in zip(m.columns, (~np.isfinite(values)).T, strict=True) if column.any()]
        zero = [] if quantity in LINEAR else [
            step for step, column in zip(m.columns, (values == 0).T, strict=True) if column.any()]
        if undefined:
            why = ZERO_INIT_UNDEFINED if undefined == [m.columns.min()] else "not finite or not recorded"
            layers_by_note.setdefault(f"blank at {_steps_text(undefined)}: undefined ({why})", []).append(layer)
        if zero:
            why = ZERO_INIT_ZERO if zero == [m.columns.min()] else "a log scale cannot show 0"
            layers_by_note.setdefault(f"blank at {_steps_text(zero)}: exactly 0 ({why})", []).append(layer)
    return [f"{', '.join(layers)}: {note}" for note, layers in layers_by_note.items()]


def quantity_figure(maps: dict[str, pd.DataFrame], quantity: str, depth: int) -> Any:
    """One heatmap panel per layer (x training step, y block index), one colour scale shared by all panels, each
    panel titled in its layer's colour; a note under the panels says why any cell is blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.ticker import MaxNLocator

    values = np.concatenate([m.to_numpy(dtype=float).ravel() for m in maps.values()]) if maps else np.array([])
    finite = values[np.isfinite(values)]
    if quantity in LINEAR:
        norm = Normalize(*(finite.min(), finite.max()) if finite.size else (0.0, 1.0))
    else:
        positive = finite[finite > 0]
        norm = LogNorm(*(positive.min(), positive.max()) if positive.size else (1e-3, 1.0))
    cols = min(3, max(1, len(maps)))
    rows = -(-len(maps) // cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(max(6, 4 * cols), 3 * rows + 0.6), squeeze=False, sharey=True,
                             layout="constrained")
    mesh = None
    for ax, (layer, m) in zip(axes.ravel(), maps.items(), strict=False):
        data = np.ma.masked_invalid(m.to_numpy(dtype=float))
        if quantity not in LINEAR:
            data = np.ma.masked_less_equal(data, 0)  # zero (a block at identity) has no log: left blank
        mesh = ax.pcolormesh(m.columns.to_numpy(), m.index.to_numpy(), data, norm=norm, shading="nearest",
                             cmap="viridis")
        ax.set_title(layer, color=layer_colour(layer))
        ax.set_xlabel("step")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # blocks are whole numbers
    for ax in axes.ravel()[len(maps):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("block")
    if mesh is not None:
        fig.colorbar(mesh, ax=axes.ravel().tolist(), shrink=0.9)
    fig.suptitle(f"{TITLES.get(quantity, quantity)}\ndepth {depth}, each layer at its selected lr (seed mean)",
                 fontsize=9)
    notes = blank_notes(maps, quantity)
    if notes:  # under the panels: savefig(bbox_inches="tight") keeps it in the file
        fig.text(0.01, -0.01, "\n".join(notes), ha="left", va="top", fontsize=8, gid="blank-note")
    return fig


def end_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The last observed step of each cell, first/middle/last block, seed mean: rows (layer, block), columns the
    quantities, values as text with 3 significant digits (blank where not finite)."""
    last = frame[frame["step"] == frame.groupby("cell_id")["step"].transform("max")]
    depth = int(frame["block"].max()) + 1
    picks = {0: "first", depth // 2: "middle", depth - 1: "last"}
    last = last[last["block"].isin(picks)]
    quantities = [q for q in QUANTITIES if q in frame]
    table = last.groupby(["layer", "block"])[quantities].mean().reset_index()
    order = {layer: i for i, layer in enumerate(layer_order(frame))}
    table = table.sort_values(["layer", "block"], key=lambda c: c.map(order) if c.name == "layer" else c)
    table["block"] = [f"{b} ({picks[b]})" for b in table["block"]]
    table[quantities] = table[quantities].map(lambda v: f"{v:.3g}" if pd.notna(v) else "")
    return table.reset_index(drop=True)


def telemetry_section(cells: pd.DataFrame, out_dir: Path, order: Sequence[str] | None = None) -> list[str]:
    """The leaderboard's telemetry section: writes telemetry_<quantity>.png into `out_dir` (panels in the suite's
    layer `order`, else sorted), returns markdown lines ([] when no cell recorded telemetry)."""
    import matplotlib.pyplot as plt
    from tabulate import tabulate

    chosen = best_lr_telemetry(telemetry_frame(cells))
    if chosen.empty:
        return []
    depth = int(chosen["depth"].iloc[0])
    lines = [f"## telemetry at depth {depth} (each layer at its selected lr, seed mean)", "",
             "End of training (last observed step), first / middle / last block. stream: the residual stream "
             "entering the block; ratio: the gated branch's RMS over the stream's; update_ratio: one step's "
             "||ΔW|| / ||W||.", "",
             tabulate(end_table(chosen), headers="keys", tablefmt="github", showindex=False, disable_numparse=True),
             ""]
    for quantity in (q for q in QUANTITIES if q in chosen and chosen[q].notna().any()):  # mix_ds_error: mHC's only
        path = Path(out_dir) / OutputFolder.telemetry_figure(quantity)
        fig = quantity_figure(block_maps(chosen, quantity, order), quantity, depth)
        save_figure(fig, path)
        plt.close(fig)
        lines.append(f"![{path.stem}]({path.name})")
    return [*lines, ""]
