"""A cell's axes as its Optuna trial's params, so optuna-dashboard lists each trial with its cell.

Optuna fixes a categorical's choices per study ("does not support dynamic value space"), yet a matrix may grow. So
numeric axes are int/float ranges (any range is accepted) and text axes categorical over the values queued so far;
a journal file accepts a grown list, a database does not: there new trials keep that axis in user attrs only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState


def axis_distributions(cells: Iterable[dict[str, Any]]) -> dict[str, BaseDistribution]:
    """`axis -> distribution` over `cells`' values: Int if all ints, Float if all numbers, else sorted Categorical."""
    values: dict[str, list[Any]] = {}
    for axes in cells:
        for axis, value in axes.items():
            values.setdefault(axis, []).append(value)
    return {axis: _distribution(vals) for axis, vals in values.items()}


def _distribution(values: list[Any]) -> BaseDistribution:
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) == len(values):
        if all(isinstance(v, int) for v in numbers):
            return IntDistribution(min(numbers), max(numbers))
        return FloatDistribution(float(min(numbers)), float(max(numbers)))
    return CategoricalDistribution(sorted(set(values), key=lambda v: (str(type(v)), str(v))))


def trial_params(axes: dict[str, Any], distributions: dict[str, BaseDistribution]) -> dict[str, Any]:
    """The axes as params: floats for float axes (an int value in a float range is stored as a float)."""
    return {k: float(v) if isinstance(distributions[k], FloatDistribution) else v for k, v in axes.items()
            if k in distributions}


def add_waiting_trial(study: optuna.Study, axes: dict[str, Any], distributions: dict[str, BaseDistribution],
                      user_attrs: dict[str, Any], system_attrs: dict[str, Any] | None = None) -> None:
    """Queue a WAITING trial with `axes` as params, or its numeric ones only where grown choices are refused."""
    _add_trial(study, axes, distributions, lambda params, kept: optuna.trial.create_trial(
        state=TrialState.WAITING, params=params, user_attrs=user_attrs, distributions=kept, system_attrs=system_attrs))


def add_finished_copy(study: optuna.Study, source: FrozenTrial, axes: dict[str, Any],
                      distributions: dict[str, BaseDistribution], user_attrs: dict[str, Any],
                      system_attrs: dict[str, Any] | None = None) -> None:
    """Add `source` (a COMPLETE or PRUNED trial of another ledger) as a finished trial of `study`: its state, value,
    per-epoch values and times, with `user_attrs` (the caller's choice of the source's) and `axes` as params."""
    def copy(params: dict[str, Any], kept: dict[str, BaseDistribution]) -> FrozenTrial:
        trial = optuna.trial.create_trial(state=source.state, value=source.value, params=params, distributions=kept,
                                          user_attrs=user_attrs, system_attrs=system_attrs,
                                          intermediate_values=dict(source.intermediate_values))
        trial.datetime_start, trial.datetime_complete = source.datetime_start, source.datetime_complete
        return trial

    _add_trial(study, axes, distributions, copy)


def _add_trial(study: optuna.Study, axes: dict[str, Any], distributions: dict[str, BaseDistribution],
               make: Callable[[dict[str, Any], dict[str, BaseDistribution]], FrozenTrial]) -> None:
    """`study.add_trial(make(params, their distributions))` with `axes` as params, or their numeric ones only where a
    database refuses a categorical's grown choices."""
    params = trial_params(axes, distributions)
    numeric = {k: v for k, v in params.items() if not isinstance(distributions[k], CategoricalDistribution)}
    for kept in (params, numeric):
        try:
            study.add_trial(make(kept, {k: distributions[k] for k in kept}))
            return
        except ValueError:  # "CategoricalDistribution does not support dynamic value space."
            if kept is numeric:
                raise
