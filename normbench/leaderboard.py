"""Ledger -> pandas -> results.csv, leaderboard.md and plots. Regenerable any time with `normbench leaderboard`.

Scoring: a cell's score is its best val top-1; a diverged cell scores 0 (a blown-up model is no model), and the
divergence count is reported beside it. A layer's number at a depth is the mean ± std over seeds at the lr whose
seed-mean is highest; "lr within 1pt" counts the lrs whose seed-mean is within 1 point of that best.
"""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

import pandas as pd
from optuna.trial import TrialState

from normbench.ledger import Ledger
from normbench.report_telemetry import telemetry_section
from normbench.suite import Suite

ROBUST_POINTS = 1.0


def cells_frame(ledger: Ledger, study_name: str) -> pd.DataFrame:
    """One row per finished cell of a study: axes, metrics, status."""
    if study_name not in ledger.study_names():
        return pd.DataFrame()
    study = ledger.study(study_name)
    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        axes = dict(t.user_attrs.get("axes") or t.params)
        result = t.user_attrs.get("result", {})
        rows.append({"cell_id": t.user_attrs.get("cell_id"), **axes, **result, "trial": t.number,
                     "tuned_params": t.user_attrs.get("overrides")})
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["score"] = frame["best_val_top1"].where(frame["status"] != "diverged", 0.0)
    return frame


def layer_table(cells: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """Per (row_keys): mean ± std over seeds at the best lr, the best lr, lr robustness, divergences, speed."""
    by_lr = cells.groupby([*row_keys, "lr"], dropna=False).agg(
        mean=("score", "mean"), std=("score", "std"), seeds=("score", "size")).reset_index()
    rows = []
    for key, group in by_lr.groupby(row_keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        best = group.loc[group["mean"].idxmax()]
        mine = cells
        for k, v in zip(row_keys, key, strict=True):
            mine = mine[mine[k] == v]
        rows.append({**dict(zip(row_keys, key, strict=True)),
                     "val top-1 (%)": format_mean_std(best["mean"], best["std"], best["seeds"]),
                     "mean": best["mean"],
                     "best lr": f"{best['lr']:g}",
                     "lr within 1pt": f"{int((group['mean'] >= best['mean'] - ROBUST_POINTS).sum())}/{len(group)}",
                     "diverged": f"{int((mine['status'] == 'diverged').sum())}/{len(mine)}",
                     "images/s": f"{mine['images_per_sec'].mean():.0f}",
                     "params (M)": f"{mine['params'].iloc[0] / 1e6:.3f}"})
    return pd.DataFrame(rows).sort_values("mean", ascending=False).drop(columns="mean")


def header(suite: Suite | None, cells: pd.DataFrame) -> list[str]:
    import timm
    import torch

    import normbench

    cpu = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else cpu
    lines = [f"# normbench leaderboard: {suite.name if suite else '?'}", ""]
    if suite is not None:
        lines += [f"- suite: `{suite.path}`" + (f" — {suite.description}" if suite.description else ""),
                  f"- dataset: {suite.dataset.name}; recipe: {suite.train}; model: {suite.model}"]
    lines += [f"- machine: {platform.node()}, {device}; normbench {normbench.__version__}, torch {torch.__version__}, "
              f"timm {timm.__version__}; written {datetime.datetime.now():%Y-%m-%d %H:%M}",
              f"- {len(cells)} cells; score = best val top-1 (%), a diverged cell scores 0; mean ± std over seeds at "
              f"each row's best lr (no ± with one seed); 'lr within 1pt' = lrs whose mean is within "
              f"{ROBUST_POINTS:g} point of the best", ""]
    return lines


def write_leaderboard(out_dir: Path, *, suite: Suite | None, storage: str | None = None,
                      tracker: Any = None) -> Path:
    """Write results.csv, leaderboard.md and the plots into `out_dir`; log them to MLflow when a tracker is given."""
    out_dir = Path(out_dir)
    ledger = Ledger(storage, out_dir)
    name = suite.name if suite else _single_suite_name(ledger)
    cells = _with_fixed_axes(cells_frame(ledger, f"run:{name}"), suite)
    tuned = _with_fixed_axes(cells_frame(ledger, f"tuned:{name}"), suite)
    if not cells.empty:
        cells.drop(columns=["history", "telemetry"], errors="ignore").to_csv(out_dir / "results.csv", index=False)
    lines = header(suite, cells)
    if cells.empty:
        lines.append("No finished cells yet.")
    else:
        extra = [c for c in (suite.matrix if suite else []) if c not in ("depth", "layer", "lr", "seed")]
        overall = layer_table(cells, ["layer", *extra, "depth"])
        for depth in sorted(cells["depth"].unique()):
            table = layer_table(cells[cells["depth"] == depth], ["layer", *extra])
            lines += [f"## depth {depth}", "", markdown_table(table), ""]
        pivot = overall.pivot_table(index=["layer", *extra], columns="depth", values="val top-1 (%)", aggfunc="first")
        pivot.columns = [f"depth {d}" for d in pivot.columns]
        lines += ["## all depths (val top-1 % at each depth's best lr)", "",
                  markdown_table(pivot.reset_index()), ""]
        plot_files = write_plots(cells, out_dir)
        lines += [f"![{p.stem}]({p.name})" for p in plot_files] + [""]
    if not tuned.empty:
        lines += tuned_section(tuned)
    lines += budget_section(ledger, name)
    lines += telemetry_section(cells, out_dir)
    path = out_dir / "leaderboard.md"
    path.write_text("\n".join(lines))
    if tracker is not None:
        tracker.log_artifacts("leaderboard", out_dir)
    return path


def tuned_section(tuned: pd.DataFrame) -> list[str]:
    keys = [c for c in ("layer", "depth") if c in tuned]
    rows = []
    for key, group in tuned.groupby(keys, sort=True):
        config = group.iloc[0].get("tuned_params", {})
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                     "mean": group["score"].mean(), "val top-1 (%)": mean_std(group["score"]),
                     "seeds": len(group), "diverged": int((group["status"] == "diverged").sum()),
                     "best config": ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                              for k, v in (config or {}).items())})
    table = pd.DataFrame(rows).sort_values("mean", ascending=False).drop(columns="mean")  # "9.5" > "85.1" as text
    return ["## tuned (equal Optuna budget per layer and depth, best config re-run over seeds)", "",
            markdown_table(table), ""]


def budget_section(ledger: Ledger, suite_name: str) -> list[str]:
    """Trials per tuning study by outcome: the evidence that every layer got the same budget."""
    prefix, nan = f"tune:{suite_name}:", float("nan")
    rows = []
    for name in sorted(n for n in ledger.study_names() if n.startswith(prefix)):
        trials = ledger.study(name).get_trials(deepcopy=False)
        spent = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        rows.append({"study": name[len(prefix):], "trials": len(spent),
                     "pruned": sum(t.state == TrialState.PRUNED for t in spent),
                     "diverged": sum(t.user_attrs.get("result", {}).get("status") == "diverged" for t in spent),
                     "lost workers (re-run)": sum(t.state == TrialState.FAIL for t in trials),
                     "best val top-1 (%)": f"{max((t.value for t in spent if t.value is not None), default=nan):.2f}"})
    if not rows:
        return []
    return ["## tuning budget (trials per study)", "", markdown_table(pd.DataFrame(rows)), ""]


def markdown_table(frame: pd.DataFrame) -> str:
    from tabulate import tabulate

    # cells are preformatted text: without disable_numparse, tabulate would turn "65.00" back into "65"
    return tabulate(frame, headers="keys", tablefmt="github", showindex=False, disable_numparse=True)


def mean_std(values: pd.Series) -> str:
    return format_mean_std(values.mean(), values.std(ddof=1), len(values))


def format_mean_std(mean: float, std: float, seeds: int) -> str:
    """'81.00 ± 1.41' over several seeds; a single seed has no spread to report, so just '81.00'."""
    return f"{mean:.2f} ± {std:.2f}" if seeds > 1 else f"{mean:.2f}"


def write_plots(cells: pd.DataFrame, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    per_lr = cells.groupby(["layer", "depth", "lr"])["score"].mean().reset_index()
    best = per_lr.groupby(["layer", "depth"])["score"].max().reset_index()
    fig, ax = plt.subplots(figsize=(6, 4))
    for layer, g in best.groupby("layer"):
        ax.plot(g["depth"], g["score"], marker="o", label=layer)
    ax.set(xlabel="depth", ylabel="val top-1 (%) at best lr", title="accuracy vs depth")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "accuracy_vs_depth.png")
    fig.savefig(paths[-1], dpi=110)
    depths = sorted(per_lr["depth"].unique())
    fig, axes = plt.subplots(1, len(depths), figsize=(4 * len(depths), 3.5), squeeze=False, sharey=True)
    for ax, depth in zip(axes[0], depths, strict=True):
        for layer, g in per_lr[per_lr["depth"] == depth].groupby("layer"):
            ax.plot(g["lr"], g["score"], marker="o", label=layer)
        ax.set(xscale="log", xlabel="lr", title=f"depth {depth}")
    axes[0][0].set_ylabel("val top-1 (%), seed mean")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "accuracy_vs_lr.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close("all")
    return paths


def _with_fixed_axes(cells: pd.DataFrame, suite: Suite | None) -> pd.DataFrame:
    """Axes the matrix does not vary still get a column, from the base recipe (the tables group by them)."""
    if cells.empty:
        return cells
    base = suite.cell({}).config if suite else None
    fixed = {"depth": base.model.depth if base else 12, "layer": base.model.layer if base else "layernorm",
             "lr": base.train.lr if base else float("nan"), "seed": base.train.seed if base else 0}
    for axis, value in fixed.items():
        if axis not in cells:
            cells[axis] = value
    return cells


def _single_suite_name(ledger: Ledger) -> str:
    names = sorted({n.split(":", 1)[1] for n in ledger.study_names() if n.startswith("run:")})
    if len(names) != 1:
        raise ValueError(f"expected one suite in {ledger.url}, found {names}")
    return names[0]
