"""Which runs sit at their row's selected lr: the tag `at_selected_lr` the view filters on (view_state.py), so a row's
mean in MLflow is the leaderboard's score even where report cells trained at an lr the row no longer selects (the
modern folder's rows whose lr moved when its resume added selection seeds). The rule is contracts/selection.py's: per
row (a cell's axes but lr and seed), the lr whose seed-mean `select` over the selection cells is highest, ties to the
smaller lr; a tuned re-run is its search's choice. It reads the whole ledger, so sync writes it on every run of the
suite at each sync, those logged live included (a cell logged live has none until then).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from normbench.contracts.names import TUNED, study_kind
from normbench.contracts.selection import DIVERGED, REPORTS, SELECTS, choose_lr, seed_mean, select_value

AT_SELECTED_TAG = "at_selected_lr"
YES, NO = "yes", "no"
NOT_ROW = ("lr", "seed")  # the axes that vary within a row


def at_selected_lr(cells: Iterable[tuple[Any, str, str, Mapping[str, Any], Mapping[str, Any] | None]]
                   ) -> dict[Any, str]:
    """`{key: "yes" | "no"}` for each finished selection, report or tuned cell of `cells`, given as (key, study,
    role, axes, result); the others (budget, search trials, failed attempts) get no tag."""
    cells = [c for c in cells if c[4]]
    by_row: dict[tuple, dict[float, list[float]]] = {}
    for _, study, role, axes, result in cells:
        if role == SELECTS and study_kind(study) != TUNED:
            by_row.setdefault(_row(axes), {}).setdefault(float(axes["lr"]), []).append(_select(result))
    chosen = {row: choose_lr({lr: seed_mean(values) for lr, values in lrs.items()}) for row, lrs in by_row.items()}
    tags = {}
    for key, study, role, axes, _ in cells:
        if study_kind(study) == TUNED:
            tags[key] = YES
        elif role in (SELECTS, REPORTS) and "lr" in axes:
            tags[key] = YES if chosen.get(_row(axes)) == float(axes["lr"]) else NO
    return tags


def _row(axes: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in axes.items() if k not in NOT_ROW))


def _select(result: Mapping[str, Any]) -> float:
    """The cell's `select` as the leaderboard's frame holds it: NaN (skipped by the seed mean) without a value."""
    if result.get("status") != DIVERGED and result.get("val_top1", result.get("best_val_top1")) is None:
        return float("nan")
    return select_value(result)
