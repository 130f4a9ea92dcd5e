"""Statistics of a suite's cells: pure functions from a DataFrame of cells to a DataFrame of results.

The protocol is normbench/spec/selection.py's rule: a cell's `select` value (val top-1, final epoch) is the only
thing that chooses (the lr of a row: `choose_lr`), its `score` (test top-1, final epoch) is only reported; a
diverged cell gets 0 for both. Cell frames get both columns from `add_scores` there. Intervals are 95% Student t
intervals over seeds. No I/O here (AlgoPerf's scoring/ is the model): tests build frames by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from normbench.spec.selection import DIVERGED, SCORE, SELECT, choose_lr, seed_mean

CONFIDENCE = 0.95  # every interval of the report: t intervals here, transfer's bootstrap percentiles


class Verdicts(NamedTuple):
    """The words `verdict` says: the interval lies above the threshold, below it, straddles it, or there is none."""

    above: str
    below: str
    neither: str
    no_interval: str


CLAIM_VERDICTS = Verdicts("supported", "contradicted", "inconclusive", "inconclusive")


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
        mean, low, high = t_interval(group[SCORE])
        rows.append({**dict(zip([*keys, "lr"], key, strict=True)), "n": len(group),
                     "select_mean": seed_mean(group[SELECT]), "mean": mean, "low": low, "high": high,
                     "diverged": int((group["status"] == DIVERGED).sum())})
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
    The lr is spec.selection.choose_lr's over the seed means of `select`; the test score never influences it.
    """
    table = per_lr(cells, keys)
    rows = []
    for key, group in table.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        group = group.sort_values("lr")
        lr = choose_lr(dict(zip(group["lr"], group["select_mean"], strict=True)))
        best = group[group["lr"] == lr].iloc[0]
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
    a = at_best[at_best["layer"] == layer].set_index("seed")[SCORE]
    b = at_best[at_best["layer"] == other].set_index("seed")[SCORE]
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


def verdict(low: float, high: float, by: float = 0.0, words: Verdicts = CLAIM_VERDICTS) -> str:
    """Where the interval [low, high] lies against `by`: `words.above` ("supported") when wholly above,
    `words.below` ("contradicted") when wholly below, else `words.neither`; `words.no_interval` without one (NaN)."""
    if math.isnan(low) or math.isnan(high):
        return words.no_interval
    return words.above if low > by else words.below if high < by else words.neither


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
