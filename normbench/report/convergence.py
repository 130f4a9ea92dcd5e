"""Has a row converged? Its final training loss against the loss's floor, and whether val was still rising.

Label smoothing ε over K classes trains against the target q = (1 - ε) one-hot + ε / K, so the cross-entropy can
fall no lower than q's entropy: 0.5003 for K = 10, ε = 0.1 (`loss_floor`). A row is converged when the median
final training loss of its seeds lies within LOSS_TOLERANCE of the way from chance (ln K) down to that floor, and
its seed-mean val curve did not rise by more than RISE_POINTS over the last RISE_SHARE of its epochs. Mixup and
cutmix train on soft, mixed targets whose floor is not a constant: there only the val test applies, and the report
says so. Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from normbench.contracts.devices import comparable, known_classes

LOSS_TOLERANCE = 0.1  # of the gap between chance's loss (ln K) and the floor
RISE_SHARE = 0.2      # the last 20% of the epochs...
RISE_POINTS = 1.0     # ...may gain at most this many val points (a least-squares fit over them)
NOT_COMPARABLE = "not comparable"  # the 2x check's reason where its cells and the 1x cells ran on different devices


def loss_floor(num_classes: int, smoothing: float) -> float:
    """The least cross-entropy a model can reach against label-smoothed targets: the targets' entropy (0 without
    smoothing)."""
    if num_classes < 2:
        raise ValueError(f"a loss floor needs at least two classes, got {num_classes}")
    true = 1.0 - smoothing + smoothing / num_classes
    other = smoothing / num_classes
    return -(true * math.log(true) if true > 0 else 0.0) - (num_classes - 1) * (other * math.log(other)
                                                                                  if other > 0 else 0.0)


def loss_threshold(num_classes: int, smoothing: float) -> float:
    """The final training loss a converged row stays under: the floor plus LOSS_TOLERANCE of (ln K - floor)."""
    floor = loss_floor(num_classes, smoothing)
    return floor + LOSS_TOLERANCE * (math.log(num_classes) - floor)


def val_gain(curve: Sequence[float]) -> float:
    """The val points gained over the last RISE_SHARE of the epochs (at least the last two): the least-squares
    slope over them times their span. NaN for a curve of fewer than two finite epochs."""
    values = np.asarray([v for v in curve if v is not None and math.isfinite(v)], dtype=float)
    if len(values) < 2:
        return math.nan
    window = values[-max(2, math.ceil(RISE_SHARE * len(values))):]
    slope = np.polyfit(np.arange(len(window)), window, 1)[0]
    return float(slope * (len(window) - 1))


@dataclass(frozen=True)
class Convergence:
    converged: bool
    reason: str  # "" when converged, else what failed: "loss 0.79 > 0.68", "val +3.2 over the last 2 epochs"


def row_convergence(final_losses: Sequence[float], val_curves: Sequence[Sequence[float]],
                    threshold: float | None) -> Convergence:
    """Whether one row (its non-diverged seeds' final training losses and val curves) converged.

    `threshold` is `loss_threshold`'s value, or None where the floor is unknown (mixup/cutmix): then only val
    is checked. A row with no non-diverged seed is not converged ("every seed diverged")."""
    losses = [v for v in final_losses if v is not None and math.isfinite(v)]
    if not losses:
        return Convergence(False, "every seed diverged")
    reasons = []
    loss = float(np.median(losses))
    if threshold is not None and loss > threshold:
        reasons.append(f"loss {loss:.2f} > {threshold:.2f}")
    length = min(len(c) for c in val_curves) if val_curves else 0
    mean_curve = np.mean([list(c)[:length] for c in val_curves], axis=0) if length else []
    gain = val_gain(list(mean_curve))
    if not math.isnan(gain) and gain > RISE_POINTS:
        epochs = max(2, math.ceil(RISE_SHARE * length))
        reasons.append(f"val +{gain:.1f} over the last {epochs} epochs")
    return Convergence(not reasons, "; ".join(reasons))


def convergence_rows(at_selected: pd.DataFrame, history: pd.DataFrame, keys: list[str],
                     threshold: float | None) -> pd.DataFrame:
    """Per row of `keys` (its cells at the selected lr): converged (bool) and reason, from `history`."""
    curves = {cid: g.sort_values("epoch")["val_top1"].tolist() for cid, g in history.groupby("cell_id")}
    rows = []
    for key, group in at_selected.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        alive = group[group["status"] != "diverged"]
        verdict = row_convergence(alive["train_loss"].tolist(),
                                  [curves[c] for c in alive["cell_id"] if c in curves], threshold)
        rows.append({**dict(zip(keys, key, strict=True)), "converged": verdict.converged, "reason": verdict.reason})
    return pd.DataFrame(rows)


# The convergence check of protocol v2 (`budget_check`): each row's selected lr trained again on two report seeds at
# twice the epochs, the schedule stretched. On the bundled digits' 360 val images one point is 3.6 images, about half
# the seed-to-seed standard deviation of a converged row's val top-1 (1.5-2.5 points in the converged sweep), so a
# change under a point is noise while a row still learning at 1x gains several (pre-LN at depth 36: ~2.4 a epoch).
BUDGET_POINTS = 1.0


def budget_rows(at_selected: pd.DataFrame, budget: pd.DataFrame, keys: list[str], *, value: str) -> pd.DataFrame:
    """Per row with budget cells at its selected lr: the seed-mean `value` (val top-1 at the final epoch, 0 when
    diverged) of the 1x cells and of the 2x cells on the same seeds and lr, their change, and the verdict: converged
    when the change is under BUDGET_POINTS either way. Columns: keys, seeds, val_1x, val_2x, change, converged,
    reason."""
    rows = []
    for key, twice in budget.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        where = dict(zip(keys, key, strict=True))
        once = at_selected
        for k, v in where.items():
            once = once[once[k] == v]
        # only the 2x cells at the lr selected now: those of an lr the row chose before more seeds moved it stay
        # results (results.csv) but check nothing
        twice = twice[np.isclose(twice["lr"].to_numpy()[:, None], once["lr"].unique()[None, :], rtol=1e-9).any(1)]
        paired = twice[twice["seed"].isin(once["seed"])]
        if paired.empty:
            continue
        same = _same_device(once, paired)  # a 1x and a 2x cell on different devices differ like seeds do, or more
        if not same.any():
            rows.append({**where, "seeds": 0, "val_1x": math.nan, "val_2x": math.nan, "change": math.nan,
                         "converged": math.nan, "reason": f"{NOT_COMPARABLE}: 2x on {_classes(paired)}, 1x on "
                                                          f"{_classes(once[once['seed'].isin(paired['seed'])])}"})
            continue
        paired = paired[same]
        once = once.set_index("seed")[value]
        val_1x, val_2x = float(once[paired["seed"]].mean()), float(paired[value].mean())
        change = val_2x - val_1x
        converged = abs(change) < BUDGET_POINTS
        reason = "" if converged else (f"still improving (+{change:.1f} at 2x)" if change > 0
                                       else f"worse at 2x ({change:.1f})")
        rows.append({**where, "seeds": len(paired), "val_1x": val_1x, "val_2x": val_2x, "change": change,
                     "converged": converged, "reason": reason})
    return pd.DataFrame(rows, columns=[*keys, "seeds", "val_1x", "val_2x", "change", "converged", "reason"])


def _same_device(once: pd.DataFrame, twice: pd.DataFrame) -> np.ndarray:
    """Per 2x cell: did its seed's 1x cell train on the same device class? (All True for frames without devices.)"""
    if "device" not in once or "device" not in twice:
        return np.ones(len(twice), dtype=bool)
    first = once.set_index("seed")["device"]
    return np.array([comparable(d, first[s]) for d, s in zip(twice["device"], twice["seed"], strict=True)], dtype=bool)


def _classes(cells: pd.DataFrame) -> str:
    return " and ".join(sorted(known_classes(cells["device"]))) if "device" in cells else "?"
