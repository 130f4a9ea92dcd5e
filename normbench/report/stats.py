"""Statistics of a suite's cells: pure functions from a DataFrame of cells to a DataFrame of results.

The protocol is normbench/contracts/selection.py's rule: a cell's `select` value (val top-1, final epoch) is the only
thing that chooses (the lr of a row: `choose_lr`), its `score` (test top-1, final epoch) is only reported; a
diverged cell gets 0 for both. Cell frames get both columns from `add_scores` there.

Only selection cells (role "select": the matrix's seeds and bracketing) choose; a row is scored on its report cells
(role "report": the suite's fresh `report_seeds`, at the chosen lr) when it has any, else on its selection cells
(and the tables say which). Score intervals are 95% Student t intervals over seeds clipped to [0, 100]; paired
comparisons get two-sided paired t p-values, Holm-adjusted over the leaderboard's family of comparisons, and read
"better"/"worse" only when the adjusted p is below ALPHA. No I/O here (AlgoPerf's scoring/ is the model): tests
build frames by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from normbench.contracts.devices import UNKNOWN, comparable, known_classes, pair_class
from normbench.contracts.selection import (
    DIVERGED,
    REPORTS,
    ROLE,
    SCORE,
    SELECT,
    SELECTS,
    at_chance,
    chance,
    choose_lr,
    lr_signal,
    seed_mean,
)

CONFIDENCE = 0.95  # every interval of the report: t intervals here, transfer's bootstrap percentiles
ALPHA = 1 - CONFIDENCE  # a Holm-adjusted p below this separates two rows


class Verdicts(NamedTuple):
    """The words `verdict` says: the interval lies above the threshold, below it, straddles it, or there is none."""

    above: str
    below: str
    neither: str
    no_interval: str


CLAIM_VERDICTS = Verdicts("supported", "contradicted", "inconclusive", "inconclusive")
# an undecided claim, split by the test's power (`claim_verdict`): it could have seen the source's effect, or not
NO_EFFECT, UNDERPOWERED = "no effect found", "underpowered"
POWER = 0.8  # the power at which a claim's detectable effect is stated (Cohen's convention)


def t_interval(values: Sequence[float] | pd.Series, confidence: float = CONFIDENCE,
               bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float, float]:
    """(mean, low, high) of a Student t interval for the mean, clipped to `bounds` (an accuracy cannot leave
    [0, 100], nor a difference of two [-100, 100]); low = high = NaN below two values."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return mean, max(bounds[0], mean - half), min(bounds[1], mean + half)


ACCURACY = (0.0, 100.0)
DIFFERENCE = (-100.0, 100.0)


def paired_p(differences: Sequence[float], by: float = 0.0, alternative: str = "two-sided") -> float:
    """p of a paired t test that the mean difference is `by` (alternative "two-sided", "greater" or "less").

    NaN below two pairs. Identical differences (to float precision) have no spread, so t is undefined: p is then the
    exact sign test's (all n on the alternative's side of `by`: 0.5^n one-sided, twice that two-sided; 1 when they
    sit on `by`). Calling an exact tie p = 0 would let two seeds whose scores happen to differ by the same 1/360 of
    the test set read "supported", where two seeds a step apart read p ~ 0.1. Their t interval is then a point,
    which this p does not follow: with fewer than 6 seeds a tie is never below ALPHA two-sided (5 seeds give
    0.031 one-sided)."""
    from scipy import stats

    x = np.asarray(differences, dtype=float) - by
    if len(x) < 2:
        return math.nan
    noise = 1e-9 * max(1.0, float(np.abs(x).max()), abs(by))  # 3 - 2.7 != 0.3
    if np.ptp(x) <= noise:
        on_by = abs(x[0]) <= noise
        side = {"two-sided": not on_by, "greater": x[0] > noise, "less": x[0] < -noise}[alternative]
        return min(1.0, 0.5 ** len(x) * (2 if alternative == "two-sided" else 1)) if side else 1.0
    return float(stats.ttest_1samp(x, 0.0, alternative=alternative).pvalue)


def detectable_effect(n: int, sd: float, alpha: float, power: float = POWER) -> float:
    """The smallest |true mean difference - `by`| a two-sided paired t test of `n` pairs at level `alpha` detects
    with probability `power`, taking the pairs' sample sd as the true one (a sensitivity analysis: what these seeds
    could have seen, not the power at the effect observed).

    Solved exactly: the test rejects when |T| > c = t_{1-alpha/2, n-1}, and under a shift d, T = (Z + λ) / √(V/df)
    is noncentral t (Z standard normal, V chi-squared with df = n - 1, λ = d·√n/sd), so its power is the mean over
    V of Φ(λ - c√(V/df)) + Φ(-λ - c√(V/df)), integrated over V's quantiles (scipy's `nct` returns NaN at the
    large λ one degree of freedom needs); the root of power(d) = `power` is found by Brent's method. The textbook
    shortcut (t_{1-alpha/2} + t_{power}) · sd/√n misstates it at 2-4 pairs, this suite's seeds (docs/protocol.md).
    NaN below two pairs or without spread (every difference equal: t is undefined, and the exact sign test's p does
    not depend on their size).
    """
    from scipy import integrate, optimize, stats
    from scipy.special import chdtri, ndtr  # the chi-squared quantile and the normal cdf, without stats' overhead

    if n < 2 or not sd > 0:
        return math.nan
    df = n - 1
    critical = float(stats.t.ppf(1 - alpha / 2, df))

    def shortfall(d: float) -> float:
        shift = d * math.sqrt(n) / sd

        def rejects(u: float) -> float:  # P(|T| > c) given V at its u-quantile
            scale = critical * math.sqrt(float(chdtri(df, 1.0 - u)) / df)
            return float(ndtr(shift - scale) + ndtr(-shift - scale))

        return integrate.quad(rejects, 0.0, 1.0, epsabs=1e-10, limit=200)[0] - power

    high = sd
    while shortfall(high) < 0:  # power(0) = alpha < power: the root lies above 0; double until it is bracketed
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-9 * sd, rtol=1e-12))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order; NaN stays NaN and does not count in the family).

    Sorted ascending, the i-th of m p-values (0-based) becomes max over j <= i of (m - j) * p_(j), capped at 1.
    """
    p = np.asarray(pvalues, dtype=float)
    finite = np.flatnonzero(~np.isnan(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    adjusted = np.full(len(p), np.nan)
    running = 0.0
    for i, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def holm_levels(pvalues: Sequence[float]) -> list[float]:
    """The level Holm's step-down compares each p-value with: ALPHA / (m - i), i its 0-based rank among the m
    finite p-values sorted ascending (ties in order, as `holm` ranks them); NaN for a NaN p. A claim's detectable
    effect is stated at its own rank's level."""
    p = np.asarray(pvalues, dtype=float)
    finite = np.flatnonzero(~np.isnan(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    levels = np.full(len(p), np.nan)
    for i, index in enumerate(order):
        levels[index] = ALPHA / (len(order) - i)
    return levels.tolist()


def selecting(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells that choose lrs (role "select"; every cell of a frame without roles)."""
    return cells[cells[ROLE] == SELECTS] if ROLE in cells else cells


def reporting(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per row of `keys` and lr: its report cells there when it has any, else its selection cells there. Read per lr
    because a row's lr may move after its report cells trained (more selection seeds): until report cells train at
    the new lr, the selection seeds score it there, marked as such, rather than no seed at all."""
    if ROLE not in cells or not (cells[ROLE] == REPORTS).any():
        return cells
    at = [*keys, "lr"]
    has_report = cells[cells[ROLE] == REPORTS][at].drop_duplicates().assign(_report_row=True)
    marked = cells.merge(has_report, on=at, how="left")
    keep = (marked["_report_row"].fillna(False).astype(bool) == (marked[ROLE] == REPORTS))
    return cells[keep.to_numpy()]


def per_lr(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (keys, lr) of the selection cells: n, select_mean, score mean/low/high, diverged (count), and
    the chance flags of the cells (for contracts.selection.lr_signal). `cells` has select/score."""
    rows = []
    for key, group in selecting(cells).groupby([*keys, "lr"], dropna=False, sort=True):
        mean, low, high = t_interval(group[SCORE], bounds=ACCURACY)
        _, select_low, select_high = t_interval(group[SELECT], bounds=ACCURACY)
        rows.append({**dict(zip([*keys, "lr"], key, strict=True)), "n": len(group),
                     "select_mean": seed_mean(group[SELECT]), "select_low": select_low, "select_high": select_high,
                     "mean": mean, "low": low, "high": high,
                     "diverged": int((group["status"] == DIVERGED).sum()),
                     "seeds": list(zip(group[SELECT], _chance_flags(group), group["status"] == DIVERGED,
                                       strict=True))})
    return pd.DataFrame(rows)


def _chance_flags(cells: pd.DataFrame) -> list[bool]:
    if "num_classes" not in cells or "val_size" not in cells:
        return [False] * len(cells)
    return [status != DIVERGED and at_chance(v, k if k == k else 0, n if n == n else 0)
            for status, v, k, n in zip(cells["status"], cells[SELECT], cells["num_classes"], cells["val_size"],
                                       strict=True)]


def edge(lrs: Sequence[float], best: float) -> str:
    """Where `best` sits in the grid `lrs`: "low" or "high" (its smallest or largest), "only" (a one-lr grid)
    or "" (interior)."""
    lrs = sorted(set(lrs))
    if len(lrs) == 1:
        return "only"
    return "low" if best == lrs[0] else "high" if best == lrs[-1] else ""


def select_lr(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per `keys`: the lr whose seed-mean `select` (val, selection cells) is highest, and what is reported there.

    Columns: keys, lr (selected), n, mean/low/high (test score at that lr over the reporting seeds, t interval
    clipped to [0, 100]), seeds ("report" or "select": which seeds scored), ok_mean/ok_n (the score among the
    seeds that did not diverge), select_mean, edge, signal (contracts.selection.lr_signal: "" or why the lrs give none),
    lrs (the grid tried), window_low/window_high (the lr window: the geometric span of lrs whose selection-seed
    score mean lies within the selected lr's selection-seed interval), diverged/cells (over every lr of the row, the
    selection cells: the failure rate). The test score never influences the lr, nor does any report cell.
    """
    table = per_lr(cells, keys)
    scored = reporting(cells, keys)
    rows = []
    for key, group in table.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        group = group.sort_values("lr")
        lr = choose_lr(dict(zip(group["lr"], group["select_mean"], strict=True)))
        best = group[group["lr"] == lr].iloc[0]
        # the window is read on val, like the choice it qualifies: test never picks an lr, nor a span of them
        inside = group[(group["select_mean"] >= best["select_low"])
                       & (group["select_mean"] <= best["select_high"])]["lr"].tolist()
        window = inside if inside else [best["lr"]]
        where = dict(zip(keys, key, strict=True))
        at_lr = _matching(scored, {**where, "lr": lr})
        mean, low, high = t_interval(at_lr[SCORE], bounds=ACCURACY)
        ok = at_lr[at_lr["status"] != DIVERGED][SCORE]
        rows.append({**where, "lr": best["lr"], "n": len(at_lr), "mean": mean, "low": low, "high": high,
                     "seeds": REPORTS if ROLE in at_lr and (at_lr[ROLE] == REPORTS).any() else SELECTS,
                     "ok_mean": float(ok.mean()) if len(ok) else math.nan, "ok_n": len(ok),
                     "select_mean": best["select_mean"], "edge": edge(group["lr"], best["lr"]),
                     "signal": lr_signal(dict(zip(group["lr"], group["seeds"], strict=True))),
                     "lrs": len(group), "window_low": min(window), "window_high": max(window),
                     "diverged": int(group["diverged"].sum()), "cells": int(group["n"].sum())})
    return pd.DataFrame(rows)


def _matching(cells: pd.DataFrame, where: dict[str, object]) -> pd.DataFrame:
    mask = np.ones(len(cells), dtype=bool)
    for k, v in where.items():
        mask &= (cells[k] == v).to_numpy() | (cells[k].isna().to_numpy() & (v != v))
    return cells[mask]


def selected_cells(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The reporting cells (one per seed) at each row's selected lr."""
    return _at_selected_lr(reporting(cells, keys), selected, keys)


def _at_selected_lr(pool: pd.DataFrame, selected: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return pool.merge(selected[[*keys, "lr"]], on=[*keys, "lr"], how="inner")


def paired_difference(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], where: dict[str, object],
                      layer: str, other: str, by: float = 0.0) -> dict[str, float]:
    """`layer` minus `other` at their own selected lrs, over the reporting seeds both have, within the rows `where`;
    over the selection seeds both have when they share no reporting seed (a sweep whose report cells have trained
    for one row and not yet for the other: pairing a report seed with a selection seed would find no pair). A seed
    whose two cells trained on different device classes is no pair (contracts/devices.py).

    Returns:
        {"n": matched seeds, "mean", "low", "high" (a 95% t interval of the mean paired difference, clipped to
        [-100, 100]), "p" (two-sided paired t test against 0), "p_by" (two-sided against `by`), "differences" (in
        seed order), "cross_device" (seeds left out for their devices), "on_selection_seeds" (True where the
        fallback paired them)}.
    """
    diffs, cross = _differences(reporting(cells, keys), selected, keys, where, layer, other)
    on_selection_seeds = False
    if not diffs and not cross:  # one row's report seeds trained, the other's not yet
        diffs, cross = _differences(selecting(cells), selected, keys, where, layer, other)
        on_selection_seeds = bool(diffs)
    return {**_paired_summary(diffs, by), "cross_device": cross, "on_selection_seeds": on_selection_seeds}


def fell_back(row: Mapping[str, object] | pd.Series) -> bool:
    """Whether `paired_difference` paired a comparison's (or a claim's) selection seeds for want of shared report
    seeds (a steadiness claim's row has no such key, or NaN: it always pairs selection seeds, by definition)."""
    flag = row.get("on_selection_seeds")
    return flag is not None and flag == flag and bool(flag)


def _differences(pool: pd.DataFrame, selected: pd.DataFrame, keys: list[str], where: dict[str, object], layer: str,
                 other: str) -> tuple[list[float], int]:
    """`layer` minus `other`, per seed both trained at their selected lrs among the `pool` cells within `where`, on
    one device class; and how many shared seeds were left out for training on different classes."""
    by_seed, mixed = seed_differences(pool, selected, keys, where, layer, other)
    return [difference for difference, _ in by_seed.values()], len(mixed)


def seed_differences(pool: pd.DataFrame, selected: pd.DataFrame, keys: list[str], where: dict[str, object],
                     layer: str, other: str) -> tuple[dict[int, tuple[float, str]], list[int]]:
    """`_differences` by seed (in seed order): {seed: (`layer` minus `other`, the pair's device class)}, and the
    shared seeds left out for their devices. The class lets a difference of two folders' differences pair seeds of
    one class too (report/interactions.py)."""
    at_best = _at_selected_lr(pool, selected, keys)
    for k, v in where.items():
        at_best = at_best[at_best[k] == v]
    a, b = (at_best[at_best["layer"] == name].set_index("seed") for name in (layer, other))
    seeds = sorted(set(a.index) & set(b.index))
    if "device" not in at_best:
        return {s: (a.at[s, SCORE] - b.at[s, SCORE], UNKNOWN) for s in seeds}, []
    same = [s for s in seeds if comparable(a.at[s, "device"], b.at[s, "device"])]
    return ({s: (a.at[s, SCORE] - b.at[s, SCORE], pair_class(a.at[s, "device"], b.at[s, "device"])) for s in same},
            [s for s in seeds if s not in same])


def versus_baseline(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], baseline: str) -> pd.DataFrame:
    """Every layer against `baseline` in each group of `keys` without "layer" (e.g. per depth): paired over matched
    seeds. Columns: the group keys, layer, n, mean, low, high, p and p_holm (Holm over every comparison returned:
    the leaderboard's family)."""
    group_keys = [k for k in keys if k != "layer"]
    rows = []
    for key, group in selected.groupby(group_keys, dropna=False, sort=True):
        where = dict(zip(group_keys, key if isinstance(key, tuple) else (key,), strict=True))
        if baseline not in set(group["layer"]):
            continue
        for layer in group["layer"]:
            if layer != baseline:
                diff = paired_difference(cells, selected, keys, where, layer, baseline)
                rows.append({**where, "layer": layer, **{k: diff[k] for k in ("n", "mean", "low", "high", "p",
                                                                              "cross_device", "on_selection_seeds")}})
    frame = pd.DataFrame(rows)
    return frame.assign(p_holm=holm(frame["p"])) if not frame.empty else frame


def reading(mean: float, p_holm: float, words: Verdicts) -> str:
    """`words.above`/`words.below` by the sign of `mean` when the Holm-adjusted p is below ALPHA, else
    `words.neither`; `words.no_interval` without a p (fewer than two paired seeds)."""
    if math.isnan(p_holm):
        return words.no_interval
    if p_holm < ALPHA:
        return words.above if mean > 0 else words.below
    return words.neither


def separation(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], table_keys: list[str]) -> pd.DataFrame:
    """Per table (group of `table_keys`): is the top row separated from the second? Paired over matched seeds,
    two-sided, Holm-adjusted over the tables. Columns: table keys, top, second, mean, p, p_holm, separated."""
    rows = []
    groups = selected.groupby(table_keys, dropna=False, sort=True) if table_keys else [((), selected)]
    for key, group in groups:
        if len(group) < 2:
            continue
        where = dict(zip(table_keys, key if isinstance(key, tuple) else (key,), strict=True))
        top, second = group.sort_values("mean", ascending=False, kind="stable")["layer"].tolist()[:2]
        diff = paired_difference(cells, selected, keys, where, top, second)
        rows.append({**where, "top": top, "second": second, "mean": diff["mean"], "p": diff["p"]})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame["p_holm"] = holm(frame["p"])
    frame["separated"] = frame["p_holm"] < ALPHA
    return frame


def verdict(low: float, high: float, by: float = 0.0, words: Verdicts = CLAIM_VERDICTS) -> str:
    """Where the interval [low, high] lies against `by`: `words.above` ("supported") when wholly above,
    `words.below` ("contradicted") when wholly below, else `words.neither`; `words.no_interval` without one (NaN)."""
    if math.isnan(low) or math.isnan(high):
        return words.no_interval
    return words.above if low > by else words.below if high < by else words.neither


MIN_COMMON_LRS = 2  # an lr sensitivity compares a row's best lr with others: one shared lr is no comparison


def lr_sensitivity(cells: pd.DataFrame, keys: list[str], group_keys: list[str]) -> pd.DataFrame:
    """Per row of `keys`: Wortsman et al. (2023)'s lr sensitivity, the mean over the lrs every row of its group
    (`group_keys`, e.g. the depth) tried of (the row's best seed-mean score over those lrs) minus (its seed-mean
    score at that lr), a diverged cell counting at chance (not 0: a failure is no worse than not learning), on the
    selection cells. Also the failure rate: the diverged share of the row's selection cells over all its lrs. Fewer
    than two common lrs measure nothing (one lr is its own best: 0 by construction): NaN, printed "—".
    Columns: keys, sensitivity, common_lrs, failed, cells."""
    chosen = _at_chance_when_diverged(selecting(cells))
    rows = []
    groups = chosen.groupby(group_keys, dropna=False, sort=True) if group_keys else [((), chosen)]
    for _, group in groups:
        lrs_by_row = group.groupby(keys, dropna=False)["lr"].agg(lambda v: frozenset(v))
        common = frozenset.intersection(*lrs_by_row) if len(lrs_by_row) else frozenset()
        for key, row in group.groupby(keys, dropna=False, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            means = row[row["lr"].isin(common)].groupby("lr")["_acc"].agg(seed_mean)
            value = float((means.max() - means).mean()) if len(means) >= MIN_COMMON_LRS else math.nan
            rows.append({**dict(zip(keys, key, strict=True)), "sensitivity": value, "common_lrs": len(means),
                         "failed": int((row["status"] == DIVERGED).sum()), "cells": len(row)})
    return pd.DataFrame(rows)



def _at_chance_when_diverged(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` with `_acc`: the score, a diverged cell's at chance (0 when the classes are unknown)."""
    guess = cells["num_classes"].map(chance) if "num_classes" in cells else pd.Series(math.nan, cells.index)
    return cells.assign(_acc=cells[SCORE].where(cells["status"] != DIVERGED, guess.fillna(0.0)))


def sensitivity_difference(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], where: dict[str, object],
                           layer: str, rival: str, by: float = 0.0) -> dict[str, float]:
    """`rival`'s lr sensitivity minus `layer`'s (positive: `layer` loses fewer points away from its best lr), paired
    over the selection seeds that trained both rows at every lr both tried. As `lr_sensitivity`: each row's best lr
    is its seed-mean best, a diverged cell counts at chance; each seed's sensitivity is its mean gap to its score at
    that lr, so the mean over seeds is the rows' sensitivity over those lrs. A row whose best seed mean is at chance
    learnt nothing to be steady about: no pairs (n 0). Returns what `paired_difference` returns (`selected` unused),
    where `cross_device` counts the paired seeds whose cells span device classes (kept, and said: `mixed_devices`)."""
    chosen = _at_chance_when_diverged(_matching(selecting(cells), where))
    rows = {name: chosen[chosen["layer"] == name] for name in (layer, rival)}
    common = sorted(set(rows[layer]["lr"]) & set(rows[rival]["lr"]))
    if len(common) < MIN_COMMON_LRS:  # rows with their own grids (`lr_by_layer`) may share too few: no pairs
        common = []
    floor = chance(chosen["num_classes"].iloc[0]) if "num_classes" in chosen and len(chosen) else math.nan

    def per_seed(row: pd.DataFrame) -> pd.Series:
        table = row.pivot_table(index="seed", columns="lr", values="_acc", aggfunc="mean")
        table = table.reindex(columns=common).dropna()  # a seed missing one of the lrs has no sensitivity
        if table.empty or table.mean().max() <= floor:
            return pd.Series(dtype=float)
        best = table.mean().idxmax()  # the seed-mean best lr, as lr_sensitivity takes it
        return table.rsub(table[best], axis=0).mean(axis=1)

    mine, theirs = per_seed(rows[layer]), per_seed(rows[rival])
    seeds = sorted(set(mine.index) & set(theirs.index))
    diffs = [theirs[s] - mine[s] for s in seeds]
    # each seed's sensitivity spans the lrs its row tried: said, not left out, where they trained on different devices
    both = chosen[chosen["layer"].isin([layer, rival]) & chosen["seed"].isin(seeds) & chosen["lr"].isin(common)]
    devices = both["device"] if "device" in both else pd.Series(None, index=both.index, dtype=object)
    mixed = sum(len(known_classes(group)) > 1 for _, group in devices.groupby(both["seed"])) if len(both) else 0
    return {**_paired_summary(diffs, by), "cross_device": mixed, "mixed_devices": True}


def _paired_summary(diffs: list[float], by: float) -> dict[str, float]:
    mean, low, high = t_interval(diffs, bounds=DIFFERENCE)
    return {"n": len(diffs), "mean": mean, "low": low, "high": high, "sd": _spread(diffs), "p": paired_p(diffs),
            "p_by": paired_p(diffs, by), "differences": [float(d) for d in diffs]}


def _spread(differences: Sequence[float]) -> float:
    """The sample sd of paired differences; 0 when they are equal to float precision (as `paired_p` reads a tie),
    NaN below two."""
    x = np.asarray(differences, dtype=float)
    if len(x) < 2:
        return math.nan
    return 0.0 if np.ptp(x) <= 1e-9 * max(1.0, float(np.abs(x).max())) else float(x.std(ddof=1))
