"""The selection and score rule, written once: what picks a row's lr and what a leaderboard reports.

A finished cell has two numbers. `select` is its val top-1 at the final epoch: the only thing that chooses (the lr
of a row in the leaderboard, MLflow's `select` column, bracketing, `normbench tune`'s objective, the telemetry
figures' lr). `score` is its test top-1 at the final epoch: only reported, never chosen on. A diverged cell gets 0
for both (a blown-up model is no model). Among a row's lrs the highest seed-mean `select` wins; ties go to the
smaller lr. Ledgers written before the test split existed have neither metric: both fall back to best-epoch val.

A row whose lrs give no signal is not treated as having an optimum (`lr_signal`): when its best lr's cells all sit
at chance nothing has learned yet (usually too small a step: bracketing steps up), and when the spread of its lr
means is within the spread of its seeds the lrs cannot be told apart (bracketing stops; the leaderboard flags it).
Only the selection seeds choose: cells with role "report" (a suite's `report_seeds`) never enter these functions'
choices; the leaderboard scores them at the lr the selection seeds chose.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas loads where a frame is computed: `normbench ui` reads these names, never a frame
    import pandas as pd

DIVERGED = "diverged"
SELECT = "select"  # column / MLflow metric: val top-1 (final epoch), 0 when diverged
SCORE = "score"    # column / MLflow metric: test top-1 (final epoch), 0 when diverged
ROLE, SELECTS, REPORTS = "role", "select", "report"  # results.csv column: which seeds chose, which only report
BUDGETS = "budget"  # role of the convergence check's cells (2x epochs): they never choose nor score
AT_CHANCE, FLAT = "at chance", "flat across lrs"  # lr_signal's two kinds of "no signal"
CHANCE_SE = 2.0  # a val top-1 within this many binomial standard errors above chance has not learned
TIE_RULE = "ties between lrs go to the smaller lr, and bracketing extends from that edge like any other"


def chance(num_classes: float) -> float:
    """Top-1 (%) of a guess: 100 / num_classes (NaN when the number of classes is unknown, e.g. old ledgers)."""
    return 100.0 / num_classes if num_classes and num_classes > 0 else math.nan


def at_chance(value: float, num_classes: float, val_size: float) -> bool:
    """Whether a val top-1 (%) is indistinguishable from guessing: at most CHANCE_SE binomial standard errors of a
    guess on `val_size` images above chance. False when either size is unknown (0 or missing)."""
    if not num_classes or num_classes <= 1 or not val_size or val_size <= 0 or not math.isfinite(value):
        return False
    p = 1.0 / num_classes
    return value <= 100.0 * (p + CHANCE_SE * math.sqrt(p * (1 - p) / val_size))


def cell_at_chance(result: Mapping[str, Any]) -> bool:
    """A finished, non-diverged cell whose selection value sits at chance."""
    if result.get("status") == DIVERGED:
        return False
    return at_chance(select_value(result), result.get("num_classes") or 0, result.get("val_size") or 0)


def select_value(result: Mapping[str, Any]) -> float:
    """A finished cell's `select`: val top-1 at the final epoch (best val for ledgers written before the test split
    existed); 0 for a diverged cell or one without a finite value."""
    if result.get("status") == DIVERGED:
        return 0.0
    value = result.get("val_top1", result.get("best_val_top1"))
    return 0.0 if value is None or not math.isfinite(value) else float(value)


def score_value(result: Mapping[str, Any]) -> float:
    """A finished cell's `score`: test top-1 at the final epoch; 0 for a diverged cell or one without a finite
    value (a pruned cell never read the test split)."""
    if result.get("status") == DIVERGED:
        return 0.0
    value = result.get("test_top1")
    return 0.0 if value is None or not math.isfinite(value) else float(value)


def cell_scores(result: Mapping[str, Any]) -> dict[str, float]:
    """`{score, select}` of one finished cell as the leaderboard defines them, at full precision (a table rounds
    where it prints, so a mean computed in MLflow is the leaderboard's); {} without both finite metrics (pruned)."""
    if result.get("status") == DIVERGED:
        return {SCORE: 0.0, SELECT: 0.0}
    test, val = result.get("test_top1"), result.get("val_top1")
    if test is None or val is None or not (math.isfinite(test) and math.isfinite(val)):
        return {}
    return {SCORE: float(test), SELECT: float(val)}


def add_scores(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` plus the `select` and `score` columns (the rule above, vectorized).

    A ledger written before the test split existed has neither metric: both fall back to best_val_top1, and
    `frame.attrs["legacy"]` is set so the report can say so.
    """
    cells = cells.copy()
    diverged = cells["status"] == DIVERGED
    legacy = "test_top1" not in cells or cells["test_top1"].isna().all() and not diverged.all()
    val = cells["best_val_top1"] if legacy else cells["val_top1"]
    test = cells["best_val_top1"] if legacy else cells["test_top1"]
    cells[SELECT] = val.where(~diverged, 0.0).astype(float)
    cells[SCORE] = test.where(~diverged, 0.0).astype(float)
    cells.attrs["legacy"] = bool(legacy)
    return cells


def seed_mean(values: Iterable[float]) -> float:
    """The mean over seeds that `choose_lr` compares (NaN skipped; NaN when no seed has a value). Every chooser
    computes it here, with the same summation, so a row's lr cannot differ between them by a rounding."""
    import pandas as pd

    return float(pd.Series(list(values), dtype=float).mean())


def choose_lr(select_mean_by_lr: Mapping[float, float]) -> float:
    """The selected lr of one row: the highest seed-mean `select`, ties to the smaller lr. A NaN mean (an lr none of
    whose cells has a value) never beats a number, as pandas' idxmax skips it."""
    if not select_mean_by_lr:
        raise ValueError("choose_lr needs at least one lr")

    def rank(lr: float) -> tuple[float, float]:
        value = select_mean_by_lr[lr]
        return (-math.inf if math.isnan(value) else value), -lr

    return max(sorted(select_mean_by_lr), key=rank)


def lr_signal(by_lr: Mapping[float, Iterable[tuple[float, bool, bool]]]) -> str:
    """Whether a row's lrs tell anything apart: AT_CHANCE when every cell of its best lr sits at chance, FLAT when the
    range of its lr means is no larger than the seeds' spread (`seed_spread`: two lrs or more; a divergence is a
    failure of that lr, not seed noise), else "".

    `by_lr` maps each lr to its cells' (select value, at chance, diverged) triples, one per seed.
    """
    cells = {lr: list(triples) for lr, triples in by_lr.items()}
    means = {lr: seed_mean(v for v, _, _ in triples) for lr, triples in cells.items()}
    best = choose_lr(means)
    if cells[best] and all(c for _, c, _ in cells[best]):
        return AT_CHANCE
    finite = [m for m in means.values() if not math.isnan(m)]
    if len(finite) >= 2 and max(finite) - min(finite) <= seed_spread(cells.values()):
        return FLAT
    return ""


# E[range] of n draws from a normal, in standard deviations (Tippett 1925; the d2 of control charts)
EXPECTED_RANGE = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078,
                  11: 3.173, 12: 3.258, 13: 3.336, 14: 3.407, 15: 3.472, 16: 3.532, 17: 3.588, 18: 3.640, 19: 3.689,
                  20: 3.735}  # past 20 seeds d2(20): the spread reads ~16% large at 40


def seed_spread(per_lr: Iterable[Iterable[tuple[float, bool, bool]]]) -> float:
    """The seeds' spread of a row: the median over its lrs of the range of the seeds that did not diverge there,
    as two seeds would show it (lrs with two such seeds or more; 0 when none has). A range grows with the seeds
    drawn (by 1.83x from 2 to 4 at one noise level), so each is scaled to its 2-seed expectation: a row does not turn
    flat because a suite added seeds (the modern sweep's mhc and hc_dynamic did, at 4). The median, so one stalled
    seed at one lr does not make every lr look alike (protocol v1 stopped pre-LN at depth 36 that way)."""
    import pandas as pd

    ranges = []
    for triples in per_lr:
        alive = [v for v, _, d in triples if not d]
        if len(alive) >= 2:
            n = min(len(alive), max(EXPECTED_RANGE))
            ranges.append((max(alive) - min(alive)) * EXPECTED_RANGE[2] / EXPECTED_RANGE[n])
    return float(pd.Series(ranges, dtype=float).median()) if ranges else 0.0


def tied(select_mean_by_lr: Mapping[float, float], lr: float) -> bool:
    """Whether another lr has exactly `lr`'s seed mean: the choice between them was the tie-break's."""
    value = select_mean_by_lr[lr]
    return any(other != lr and v == value for other, v in select_mean_by_lr.items())


def chosen_lrs(cells: pd.DataFrame, keys: list[str], by: str = SELECT) -> pd.DataFrame:
    """One row per group of `keys` with its selected `lr` (choose_lr over the group's seed means of `by`), from the
    selection cells only (a frame with a `role` column keeps its "select" rows)."""
    import pandas as pd

    if ROLE in cells:
        cells = cells[cells[ROLE] == SELECTS]
    means = cells.groupby([*keys, "lr"], dropna=False, sort=True)[by].agg(seed_mean)
    rows = []
    for key, group in means.groupby(level=list(range(len(keys))), dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        lr = choose_lr({float(index[-1]): float(v) for index, v in group.items()})
        rows.append({**dict(zip(keys, key, strict=True)), "lr": lr})
    return pd.DataFrame(rows, columns=[*keys, "lr"])


def edge_side(tried: list[float], best: float) -> str | None:
    """"low" or "high" when `best` is the smallest or largest of the (sorted) lrs tried, else None (also for one
    lr: no grid to take a step from)."""
    if len(tried) < 2:
        return None
    return "high" if best == tried[-1] else "low" if best == tried[0] else None


def lrs_beyond(tried: Iterable[float], grid: list[float], side: str) -> int:
    """How many of the lrs tried lie beyond the suite's grid on `side` (the bracketing steps taken there)."""
    if side == "high":
        return sum(lr > grid[-1] * (1 + 1e-9) for lr in tried)
    return sum(lr < grid[0] * (1 - 1e-9) for lr in tried)
