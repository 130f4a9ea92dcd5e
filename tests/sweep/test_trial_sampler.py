"""A tune search samples each trial from a sampler seeded by (study, trial number): two workers, or a restart, never
draw the same configuration in turn, and the same trial draws the same values again."""

from __future__ import annotations

import optuna

from normbench.sweep.trial_sampler import TrialSeededSampler, trial_seed

SPACE = {"lr": optuna.distributions.FloatDistribution(1e-4, 3e-2, log=True),
         "weight_decay": optuna.distributions.FloatDistribution(0.0, 0.2)}


def tpe(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(n_startup_trials=5, seed=seed, constant_liar=True)


def draw(study: optuna.Study) -> dict[str, float]:
    trial = study.ask()
    return {name: trial._suggest(name, dist) for name, dist in SPACE.items()}


def test_two_workers_with_their_own_sampler_draw_different_trials():
    storage = optuna.storages.InMemoryStorage()
    # each worker process builds its own sampler, as `tune --workers 2` does (seed 0 in both drew twins)
    first = optuna.create_study(study_name="tune:s:depth=36,layer=dyt", storage=storage,
                                sampler=TrialSeededSampler(tpe))
    second = optuna.load_study(study_name="tune:s:depth=36,layer=dyt", storage=storage,
                               sampler=TrialSeededSampler(tpe))
    drawn = [draw(first), draw(second), draw(first), draw(second)]
    assert len({tuple(d.values()) for d in drawn}) == 4, drawn


def first_draws(name: str, stream: str | None = None, n: int = 3) -> list[dict[str, float]]:
    study = optuna.create_study(study_name=name, storage=optuna.storages.InMemoryStorage(),
                                sampler=TrialSeededSampler(tpe, stream))
    drawn = []
    for _ in range(n):
        trial = study.ask()
        drawn.append({name: trial._suggest(name, dist) for name, dist in SPACE.items()})
        study.tell(trial, 0.5)
    return drawn


def test_a_trial_draws_the_same_values_wherever_it_is_sampled_and_studies_differ():
    assert first_draws("tune:s:layer=a") == first_draws("tune:s:layer=a")  # a restart's trials: the same draws
    assert first_draws("tune:s:layer=a") != first_draws("tune:s:layer=b")  # without a stream, each study its own
    assert trial_seed("tune:s:layer=a", 0) != trial_seed("tune:s:layer=a", 1)


def test_rows_sharing_a_stream_draw_the_same_startup_trials_and_a_new_value_each_trial():
    a, b = first_draws("tune:s:layer=a", stream="tune:s:"), first_draws("tune:s:layer=b", stream="tune:s:")
    assert a == b  # common random numbers: the rows' random startup trials alike
    assert len({tuple(d.values()) for d in a}) == 3, a
