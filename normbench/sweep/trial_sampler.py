"""A tune search's sampler, seeded per trial: each trial draws from a sampler seeded by (study name, trial number).

One sampler seeded once per process repeats itself across processes: every worker of `tune --workers 2` (and every
restart) built TPE with seed 0, so the two drew the same configuration in turn and half of a search's trials were
twins (a review's 2-worker run: trials 0/1, 2/3 and 4/5 identical, to the val score). Seeding by trial number gives
every trial its own draw wherever it runs, and the same draw again for the same trial (a reproducible search when
trials are sampled one after another). TPE's model part still reads the study's history as it stands then; its
`constant_liar` makes a trial running on another worker count as a bad result, so two workers do not explore the
same point (Optuna's advice for parallel TPE).

A `stream` shared by several studies (a tune suite's rows) gives their trial n the same seed: every row's random
startup trials draw the same values of the keys they share (common random numbers), so rows differ by what they
train, not by a luckier draw; a row's own `layer.*` keys are drawn after those and do not shift them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState


def trial_seed(study_name: str, number: int) -> int:
    """The seed of a trial's sampler: a function of the study and the trial number alone (stable across processes,
    unlike Python's `hash`)."""
    return zlib.crc32(f"{study_name}:{number}".encode())


class TrialSeededSampler(BaseSampler):
    """Delegates each trial to its own sampler, `make(trial_seed(stream or study name, number))`."""

    def __init__(self, make: Callable[[int], BaseSampler], stream: str | None = None) -> None:
        self._make = make
        self._stream = stream
        self._by_trial: dict[tuple[str, int], BaseSampler] = {}

    def _for(self, study: optuna.Study, trial: FrozenTrial) -> BaseSampler:
        key = (study.study_name, trial.number)
        if key not in self._by_trial:
            self._by_trial[key] = self._make(trial_seed(self._stream or study.study_name, trial.number))
        return self._by_trial[key]

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._for(study, trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._for(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self._for(study, trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._for(study, trial).before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self._for(study, trial).after_trial(study, trial, state, values)
        self._by_trial.pop((study.study_name, trial.number), None)

    def reseed_rng(self) -> None:  # each trial's seed is fixed by design: nothing to reseed
        pass
