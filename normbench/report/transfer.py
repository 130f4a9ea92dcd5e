"""Does a reference suite's layer ranking hold here? Spearman's rho between the two suites' scores, with an interval.

Both frames are cell frames with `select`/`score` (contracts.selection.add_scores). Per (layer, depth) each frame's lr
is chosen by stats.select_lr (val only) and its score is the test mean over seeds there. Per depth present in both
frames, rho is taken over the layers both ran; with fewer than MIN_LAYERS there is no rho, only a note. Pure
functions, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from normbench.report.rank_agreement import permutation_p, pooled_permutation_p, ranks, spearman
from normbench.report.stats import CONFIDENCE, Verdicts, select_lr, selected_cells, verdict

KEYS = ["layer", "depth"]
MIN_LAYERS = 3  # two layers give rho = ±1 whatever the evidence
RESAMPLES = 2000
ALPHA = 0.05  # "holds" also needs the permutation p of rho below this: six layers give rho 0.77 by chance 1 in 20
# rho's interval against 0: above, the ranking holds here (when its permutation p < ALPHA too); below, it is reversed
TRANSFER_VERDICTS = Verdicts("holds", "reversed", "not settled", "not settled")
POOLED = "all"  # the `depth` of the pooled row


@dataclass
class Transfer:
    """summary: one row per common depth (and a pooled row, depth "all"): depth, layers, rho, low, high, verdict.
    rankings: one row per (depth, common layer): scores, ranks (1 = best, ties averaged) and lrs of both frames.
    notes: why a depth has no rho or no interval."""

    summary: pd.DataFrame  # with `p`: the one-sided permutation p of rho (report/rank_agreement.py)
    rankings: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def seed_scores(cells: pd.DataFrame) -> tuple[pd.DataFrame, dict[tuple[str, int], np.ndarray]]:
    """select_lr's rows (layer, depth) and, per row, the seed scores at its selected lr."""
    selected = select_lr(cells, KEYS)
    at_best = selected_cells(cells, selected, KEYS)
    scores = {(layer, depth): g["score"].to_numpy(dtype=float) for (layer, depth), g in at_best.groupby(KEYS)}
    return selected, scores


def _resampled_means(scores: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` means of `scores` drawn with replacement (the seed bootstrap of one layer at one lr)."""
    draws = rng.integers(0, len(scores), size=(resamples, len(scores)))
    return scores[draws].mean(axis=1)


def _interval(replicates: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - CONFIDENCE) / 2
    finite = replicates[np.isfinite(replicates)]
    if len(finite) == 0:
        return math.nan, math.nan
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def transfer_verdict(low: float, high: float, p: float) -> str:
    """holds: the interval lies above 0 and the permutation p is below ALPHA; reversed: the interval lies below 0;
    else not settled."""
    word = verdict(low, high, words=TRANSFER_VERDICTS)
    if word == TRANSFER_VERDICTS.above and not p < ALPHA:
        return TRANSFER_VERDICTS.neither
    return word


RANK_COLUMNS = ["depth", "layer", "score_here", "score_there", "rank_here", "rank_there", "lr_here", "lr_there",
                "n_here", "n_there"]


def ranking_transfer(here: pd.DataFrame, there: pd.DataFrame, *, resamples: int = RESAMPLES,
                     seed: int = 0) -> Transfer:
    """Spearman's rho of the layer scores of `here` against `there`, per common depth and pooled.

    The interval is a 95% percentile bootstrap: each replicate resamples the seeds with replacement within every
    (layer, selected lr) of each frame independently and recomputes the means and rho. The lr chosen by the point
    estimate is kept fixed (selection is not re-run per replicate), so the interval covers seed noise in the
    scores, not the uncertainty of the lr choice. A row with a single seed in either frame cannot be resampled:
    its depth gets a rho but no interval (a zero-width interval would claim certainty from one seed).

    Pooled ("all"): the mean of the per-depth rhos over the depths that have one (each depth counts once, whatever
    its number of layers); its interval comes from the same replicates, the mean taken in each.
    """
    rng = np.random.default_rng(seed)
    sel_here, scores_here = seed_scores(here)
    sel_there, scores_there = seed_scores(there)
    merged = sel_here[[*KEYS, "lr", "mean", "n"]].merge(sel_there[[*KEYS, "lr", "mean", "n"]], on=KEYS,
                                                         suffixes=("_here", "_there"))
    rows, rank_rows, notes = [], [], []
    point_rhos, replicate_rhos, pairs = [], [], []
    for depth in sorted(set(sel_here["depth"]) & set(sel_there["depth"])):
        common = merged[merged["depth"] == depth].sort_values("layer")
        layers = common["layer"].tolist()
        a, b = common["mean_here"].to_numpy(float), common["mean_there"].to_numpy(float)
        rank_a, rank_b = ranks(a), ranks(b)
        rank_rows += [{"depth": depth, "layer": layer, "score_here": a[i], "score_there": b[i],
                       "rank_here": rank_a[i], "rank_there": rank_b[i],
                       "lr_here": common["lr_here"].iloc[i], "lr_there": common["lr_there"].iloc[i],
                       "n_here": int(common["n_here"].iloc[i]), "n_there": int(common["n_there"].iloc[i])}
                      for i, layer in enumerate(layers)]
        row = {"depth": depth, "layers": len(layers), "rho": math.nan, "p": math.nan, "low": math.nan,
               "high": math.nan}
        if len(layers) < MIN_LAYERS:
            notes.append(f"depth {depth}: {len(layers)} layer(s) in both suites ({', '.join(layers) or 'none'}); "
                         f"a rank correlation needs at least {MIN_LAYERS}")
            rows.append({**row, "verdict": "—"})
            continue
        row["rho"], row["p"] = spearman(a, b), permutation_p(a, b)
        point_rhos.append(row["rho"])
        pairs.append((a, b))
        single = [layer for layer in layers
                  if min(len(scores_here[(layer, depth)]), len(scores_there[(layer, depth)])) < 2]
        if single:
            notes.append(f"depth {depth}: one seed for {', '.join(single)} in one suite: no interval")
            replicate_rhos.append(np.full(resamples, np.nan))
        else:
            boot_a = np.column_stack([_resampled_means(scores_here[(layer, depth)], resamples, rng)
                                      for layer in layers])
            boot_b = np.column_stack([_resampled_means(scores_there[(layer, depth)], resamples, rng)
                                      for layer in layers])
            replicate_rhos.append(spearman(boot_a, boot_b))
            row["low"], row["high"] = _interval(replicate_rhos[-1])
        rows.append({**row, "verdict": transfer_verdict(row["low"], row["high"], row["p"])})
    if point_rhos:
        # a replicate with a constant side (all tied) has no rho: NaN there, excluded from the percentiles
        pooled = np.mean(np.vstack(replicate_rhos), axis=0)
        low, high = _interval(pooled)
        p = pooled_permutation_p(pairs)
        rows.append({"depth": POOLED, "layers": sum(r["layers"] for r in rows if not math.isnan(r["rho"])),
                     "rho": float(np.mean(point_rhos)), "p": p, "low": low, "high": high,
                     "verdict": transfer_verdict(low, high, p)})
    if not rows:
        notes.append("no depth is in both suites")
    # with the columns even when empty: no depth in both suites is a note, and the tables below read `depth`
    return Transfer(summary=pd.DataFrame(rows), rankings=pd.DataFrame(rank_rows, columns=RANK_COLUMNS), notes=notes)
