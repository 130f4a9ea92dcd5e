"""Statistics of a suite's cells: pure functions from a DataFrame of cells to a DataFrame of results.

The protocol: a cell's `select` value is its val top-1 at the final epoch and its `score` is its test top-1 at the
final epoch; a diverged cell gets 0 for both (a blown-up model is no model). Everything that is *chosen* (the best
lr of a row) reads `select` only; `score` is only reported. Intervals are 95% Student t intervals over seeds.
No I/O here (AlgoPerf's scoring/ is the model): tests build frames by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

CONFIDENCE = 0.95


def add_scores(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` plus `select` (val top-1, final epoch) and `score` (test top-1, final epoch), diverged = 0.

    A ledger written before the test split existed has neither metric: both fall back to best_val_top1, and
    `frame.attrs["legacy"]` is set so the report can say so.
    """
    cells = cells.copy()
    diverged = cells["status"] == "diverged"
    legacy = "test_top1" not in cells or cells["test_top1"].isna().all() and not diverged.all()
    val = cells["best_val_top1"] if legacy else cells["val_top1"]
    test = cells["best_val_top1"] if legacy else cells["test_top1"]
    cells["select"] = val.where(~diverged, 0.0).astype(float)
    cells["score"] = test.where(~diverged, 0.0).astype(float)
    cells.attrs["legacy"] = bool(legacy)
    return cells


def t_interval(values: Sequence[float] | pd.Series, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high) of a Student t interval for the mean; low = high = NaN below two values."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def per_lr(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (keys, lr): n, select_mean, score mean/low/high, diverged (count). `cells` has select/score."""
    rows = []
    for key, group in cells.groupby([*keys, "lr"], dropna=False, sort=True):
        mean, low, high = t_interval(group["score"])
        rows.append({**dict(zip([*keys, "lr"], key, strict=True)), "n": len(group),
                     "select_mean": float(group["select"].mean()), "mean": mean, "low": low, "high": high,
                     "diverged": int((group["status"] == "diverged").sum())})
    return pd.DataFrame(rows)


def edge(lrs: Sequence[float], best: float) -> str:
    """Where `best` sits in the grid `lrs`: "low" or "high" (its smallest or largest), "only" (a one-lr grid)
    or "" (interior)."""
    lrs = sorted(set(lrs))
    if len(lrs) == 1:
        return "only"
    return "low" if best == lrs[0] else "high" if best == lrs[-1] else ""


def select_lr(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per `keys`: the lr whose seed-mean `select` (val) is highest, and what is reported there.

    Columns: keys, lr (selected), n, mean/low/high (test score at that lr), select_mean, edge, lrs (the grid
    tried), window_low/window_high (the lr window: the geometric span of lrs whose score mean lies within the
    selected lr's interval; just the selected lr with one seed), diverged/cells (over every lr of the row).
    Ties in `select` go to the smaller lr. The test score never influences which lr is chosen.
    """
    table = per_lr(cells, keys)
    rows = []
    for key, group in table.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        group = group.sort_values("lr")
        best = group.loc[group["select_mean"].idxmax()]
        inside = group[(group["mean"] >= best["low"]) & (group["mean"] <= best["high"])]["lr"].tolist()
        window = inside if inside else [best["lr"]]
        rows.append({**dict(zip(keys, key, strict=True)), "lr": best["lr"], "n": int(best["n"]),
                     "mean": best["mean"], "low": best["low"], "high": best["high"],
                     "select_mean": best["select_mean"], "edge": edge(group["lr"], best["lr"]),
                     "lrs": len(group), "window_low": min(window), "window_high": max(window),
                     "diverged": int(group["diverged"].sum()), "cells": int(group["n"].sum())})
    return pd.DataFrame(rows)


def selected_cells(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The cells (one per seed) at each row's selected lr."""
    return cells.merge(selected[[*keys, "lr"]], on=[*keys, "lr"], how="inner")


def paired_difference(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], where: dict[str, object],
                      layer: str, other: str) -> dict[str, float]:
    """`layer` minus `other` at their own selected lrs, over the seeds both have, within the row group `where`.

    Returns:
        {"n": matched seeds, "mean", "low", "high"} (a 95% t interval of the mean paired difference).
    """
    at_best = selected_cells(cells, selected, keys)
    for k, v in where.items():
        at_best = at_best[at_best[k] == v]
    a = at_best[at_best["layer"] == layer].set_index("seed")["score"]
    b = at_best[at_best["layer"] == other].set_index("seed")["score"]
    seeds = sorted(set(a.index) & set(b.index))
    mean, low, high = t_interval([a[s] - b[s] for s in seeds])
    return {"n": len(seeds), "mean": mean, "low": low, "high": high}


def versus_baseline(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], baseline: str) -> pd.DataFrame:
    """Every layer against `baseline` in each group of `keys` without "layer" (e.g. per depth): paired over matched
    seeds. Columns: the group keys, layer, n, mean, low, high."""
    group_keys = [k for k in keys if k != "layer"]
    rows = []
    for key, group in selected.groupby(group_keys, dropna=False, sort=True):
        where = dict(zip(group_keys, key if isinstance(key, tuple) else (key,), strict=True))
        if baseline not in set(group["layer"]):
            continue
        for layer in group["layer"]:
            if layer != baseline:
                rows.append({**where, "layer": layer,
                             **paired_difference(cells, selected, keys, where, layer, baseline)})
    return pd.DataFrame(rows)


def verdict(low: float, high: float, by: float = 0.0) -> str:
    """"supported" when the interval lies above `by`, "contradicted" when below, else "inconclusive"."""
    if math.isnan(low) or math.isnan(high):
        return "inconclusive"
    return "supported" if low > by else "contradicted" if high < by else "inconclusive"


def check_claims(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str],
                 claims: list[dict[str, object]]) -> pd.DataFrame:
    """One row per claim (per combination of the other axes at its depth): the paired difference and a verdict.

    A claim is {layer, beats, depth, by (default 0)}: "`layer` beats `beats` at `depth` by more than `by` points".
    """
    group_keys = [k for k in keys if k not in ("layer", "depth")]
    rows = []
    for claim in claims:
        at_depth = selected[selected["depth"] == claim["depth"]]
        groups = at_depth.groupby(group_keys, dropna=False) if group_keys else [((), at_depth)]
        for key, _ in groups:
            where = {**dict(zip(group_keys, key if isinstance(key, tuple) else (key,), strict=True)),
                     "depth": claim["depth"]}
            diff = paired_difference(cells, selected, keys, where, str(claim["layer"]), str(claim["beats"]))
            by = float(claim.get("by", 0.0))  # type: ignore[arg-type]
            rows.append({**claim, **where, "by": by, **diff, "verdict": verdict(diff["low"], diff["high"], by)})
    return pd.DataFrame(rows)
