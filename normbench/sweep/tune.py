"""`normbench tune`: the same Optuna budget for every (layer, depth), then the best configuration over seeds.

One study per matrix point without seed and tuned axes (`tune:<suite>:depth=12,layer=layerscale`), with exactly
`tune.trials` slots queued up front: an equal budget however many workers share it (pruned, diverged ones count).
Searches train on `search_seed` (past the matrix's seeds), ranked by final-epoch val top-1 (contracts/selection.py);
each best config is then re-run on the matrix's seeds in `tuned:<suite>`, so its lucky draw is not counted again, and
reported by test top-1 like `normbench run`."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.layer_tunables import space_for
from normbench.contracts.names import StudyNames
from normbench.contracts.selection import choose_lr, seed_mean
from normbench.contracts.suite import Suite, TuneConfig, cell_id
from normbench.contracts.tuning import (
    LABEL,
    SEARCH_TRIAL,
    apply_sampled,
    confirm_seed,
    recipe_axes,
    search_in_flight,
    search_keys,
    search_point,
    search_seed,
    seeds,
    tune_section,
)
from normbench.errors import ClaimLostError, SuiteError
from normbench.store.claim import Claim
from normbench.store.ledger import UNFINISHED, Ledger
from normbench.sweep.cells import cell_run, check_recipe, open_study_of_recipe
from normbench.sweep.plan import Job, Plan
from normbench.sweep.progress import Progress
from normbench.sweep.trial_sampler import TrialSeededSampler


def trial_label(key: dict[str, Any], sampled: dict[str, Any], number: int) -> str:
    """`depth=2,layer=rezero,lr=0.00316,trial=4` (floats to 3 significant digits): progress lines, MLflow run name."""
    shown = {k: float(f"{v:.3g}") if isinstance(v, float) else v for k, v in sampled.items()}
    return f"{cell_id({**key, **shown})},trial={number}"


def suggest(trial: optuna.Trial, key: str, dist: dict[str, Any]) -> Any:
    if "choices" in dist:
        return trial.suggest_categorical(key, dist["choices"])
    if isinstance(dist["low"], int) and isinstance(dist["high"], int) and not dist.get("log"):
        return trial.suggest_int(key, dist["low"], dist["high"], step=dist.get("step", 1))
    # a float range with a step (drop_path_rate 0 to 0.3 by 0.1) is a grid of floats, as Optuna samples it
    return trial.suggest_float(key, dist["low"], dist["high"], log=bool(dist.get("log", False)),
                               step=dist.get("step"))


def _sampler_and_pruner(tune: TuneConfig, stream: str) -> dict[str, Any]:
    """Each trial its own seeded sampler, trial n of every row seeded alike (`stream`: sweep/trial_sampler.py; workers
    and restarts draw different trials, rows the same random startup draws); the
    pruner's warm-up is `tune.prune_after` of a trial's epochs (Job.may_prune), not Optuna's `n_warmup_steps`: the
    steps reported are optimizer steps (~16 an epoch here), and a trial judged after its first epoch loses slow
    starters (a small lr, a long warmup): in the modern folder the lr best at epoch 40 sat below its row's median
    after epoch 1 in 7 of 23 rows, after epoch 8 in none."""
    def make(seed: int) -> optuna.samplers.BaseSampler:
        if tune.sampler == "tpe":
            return optuna.samplers.TPESampler(n_startup_trials=tune.startup_trials, seed=seed, constant_liar=True)
        return optuna.samplers.RandomSampler(seed=seed)

    pruner = (optuna.pruners.MedianPruner(n_startup_trials=tune.startup_trials, n_warmup_steps=0)
              if tune.pruner == "median" else optuna.pruners.NopPruner())
    return {"sampler": TrialSeededSampler(make, stream), "pruner": pruner}


SEARCH_ATTR = "search"  # a search study's user attr: the terms its trials were drawn under (search_terms)


def search_terms(tune: TuneConfig, layer: str) -> dict[str, Any]:
    """What a row's search draws its trials under: its space (the recipe's keys and its layer's own) and how trials
    are sampled, pruned and confirmed. A resume under other terms would mix two searches in one study; a larger
    `trials` only extends every row's budget alike."""
    return {"space": space_for(tune.space, layer), "sampler": tune.sampler,
            "pruner": tune.pruner, "startup_trials": tune.startup_trials, "prune_after": tune.prune_after,
            "confirm_top": tune.confirm_top}


def check_search(ledger: Ledger, suite: Suite, study: optuna.Study, terms: dict[str, Any]) -> None:
    """Refuse (SuiteError, exit 2) to resume a search whose `tune:` terms changed since its trials were drawn."""
    before = study.user_attrs.get(SEARCH_ATTR)
    if before is None or json.loads(json.dumps(terms)) == before:  # a ledger older than the stamp: nothing to compare
        return
    changed = ", ".join(k for k in terms if before.get(k) != json.loads(json.dumps(terms[k])))
    raise SuiteError(f"{suite.path}: tune: {changed} changed since the trials of {study.study_name} were drawn "
                     f"({ledger.url}); resuming would mix two searches in one budget. Put the old values back, or use "
                     "another --out (or --storage)")


def open_tune(suite: Suite, ledger: Ledger, out_dir: Path, *,
              quiet: bool = False) -> tuple[Plan, list[str], Progress]:
    """Check every study's recipe and queue each search's budget; returns (jobs, studies to watch, progress)."""
    tune = tune_section(suite)
    names = StudyNames(suite.name)
    keys = search_keys(suite)
    searches = {cell_id(key): names.tune(cell_id(key)) for key in keys}
    existing = set(ledger.study_names())

    def row_layer(key: dict[str, Any]) -> str:
        return str(key.get("layer", suite.model.get("layer", "layernorm")))

    for name in [*searches.values(), names.confirm, names.tuned]:  # every check before any write: a refused tune
        if name in existing:                                         # changes nothing
            check_recipe(ledger, suite, ledger.study(name))
    for key in keys:
        if searches[cell_id(key)] in existing:
            check_search(ledger, suite, ledger.study(searches[cell_id(key)]), search_terms(tune, row_layer(key)))
    studies, sampling = [], _sampler_and_pruner(tune, stream=names.tune(""))  # one stream: the rows' draws alike
    for key in keys:
        study = open_study_of_recipe(ledger, suite, searches[cell_id(key)], **sampling)
        if SEARCH_ATTR not in study.user_attrs:
            ledger.call(study.set_user_attr, SEARCH_ATTR, search_terms(tune, row_layer(key)))
        ledger.enqueue(study, {f"slot-{i}": {} for i in range(tune.trials)})
        studies.append((key, study))

    def search_job(key: dict[str, Any], study: optuna.Study) -> Job:
        space = space_for(tune.space, row_layer(key))

        def cell_for(claim: Claim) -> tuple[str, dict[str, Any], Any]:
            axes = {**key, "seed": search_seed(suite)}
            sampled = ledger.call(lambda: {k: suggest(claim.trial, k, d) for k, d in space.items()})
            config = apply_sampled(suite.cell(axes), sampled)
            label = trial_label(key, sampled, claim.number)
            with contextlib.suppress(ClaimLostError):  # a lost claim: run_cell notices it
                claim.set_attr(LABEL, label)  # for the parent of local workers, which prints it
            return label, cell_run(suite, claim), config

        return Job(study=study, cell_for=cell_for, prune_after=tune.prune_after, max_in_flight=search_in_flight(tune))

    def overrides_job(study: optuna.Study) -> Job:
        """The confirmations and the re-runs: a cell at its axes with a search trial's sampled values."""
        def cell_for(claim: Claim) -> tuple[str, dict[str, Any], Any]:
            axes, overrides = claim.trial.user_attrs["axes"], claim.trial.user_attrs["overrides"]
            config = apply_sampled(suite.cell(recipe_axes(axes)), overrides)
            return cell_id(axes), cell_run(suite, claim), config

        return Job(study=study, cell_for=cell_for)

    def jobs() -> list[Job]:
        current = [search_job(key, study) for key, study in studies]
        later = [overrides_job(ledger.study(n)) for n in (names.confirm, names.tuned) if n in ledger.study_names()]
        return [*current, *later]

    def queue_next() -> None:
        """Once every search is over, queue each one's best trials on the confirmation seed (`confirm_top`); once
        those are over too (or with none), each search's winner on the re-run seeds."""
        if any(ledger.trials(study, UNFINISHED) for _, study in studies):
            return
        if tune.confirm_top and not _confirmations_queued(ledger, names.confirm, studies, tune.confirm_top, suite):
            return
        if names.confirm in ledger.study_names() and ledger.trials(ledger.study(names.confirm), UNFINISHED):
            return
        confirmed = confirmation_values(ledger, names.confirm)
        tuned = open_study_of_recipe(ledger, suite, names.tuned)
        items, extra = {}, {}
        for key, study in studies:
            complete = ledger.trials(study, (TrialState.COMPLETE,))
            if not complete:
                continue  # every trial pruned: nothing to re-run
            best = best_trial(complete, confirmed.get(cell_id(key), {}) if tune.confirm_top else None)
            for seed in seeds(suite):
                axes = {**key, "seed": seed}
                items[cell_id(axes)], extra[cell_id(axes)] = axes, {"overrides": best.params,
                                                                    SEARCH_TRIAL: best.number}
        ledger.enqueue(tuned, items, extra)

    confirm = tune.confirm_top * len(keys)
    progress = Progress(total=len(keys) * (tune.trials + len(seeds(suite))) + confirm, quiet=quiet)
    progress.note(f"tune {suite.name}: {len(keys)} studies x {tune.trials} trials on seed {search_seed(suite)}"
                  + (f", the best {tune.confirm_top} of each again on seed {confirm_seed(suite)}" if confirm else "")
                  + f", then the best of each over seed(s) {seeds(suite)}; output in {out_dir}")
    studies_watched = [*searches.values(), *([names.confirm] if confirm else []), names.tuned]
    return Plan(jobs=jobs, queue_next=queue_next), studies_watched, progress


def _confirmations_queued(ledger: Ledger, name: str, studies: list[tuple[dict[str, Any], optuna.Study]],
                          top: int, suite: Suite) -> bool:
    """Queue each search's `top` best trials on the confirmation seed, once per search: a search trial that finishes
    later (a crashed slot run again by a later start) cannot add a confirmation beside the chosen ones, which would
    move the winner away from the re-runs already queued. True once they are queued (then the caller waits)."""
    confirm = open_study_of_recipe(ledger, suite, name)
    chosen = {cell_id(search_point(t.user_attrs["axes"])) for t in ledger.trials(confirm)}
    items, extra = {}, {}
    for key, study in studies:
        if cell_id(key) in chosen:
            continue
        ranked = sorted(ledger.trials(study, (TrialState.COMPLETE,)),
                        key=lambda t: (-_value(t), t.number))[:top]  # the best val first, ties to the earlier
        for t in ranked:
            axes = {**key, "seed": confirm_seed(suite), SEARCH_TRIAL: t.number}
            items[cell_id(axes)], extra[cell_id(axes)] = axes, {"overrides": t.params}
    ledger.enqueue(confirm, items, extra)
    return True


def confirmation_values(ledger: Ledger, name: str) -> dict[str, dict[int, float]]:
    """`{search point id: {search trial number: its val on the confirmation seed}}` of the finished confirmations."""
    if name not in ledger.study_names():
        return {}
    values: dict[str, dict[int, float]] = {}
    for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE, TrialState.PRUNED)):
        axes = t.user_attrs["axes"]
        point = search_point(axes)
        values.setdefault(cell_id(point), {})[int(axes[SEARCH_TRIAL])] = math.nan if t.value is None else t.value
    return values


def _value(trial: FrozenTrial) -> float:
    """A trial's final-epoch val top-1; a trial without one (diverged, pruned early) ranks last."""
    return -math.inf if trial.value is None or math.isnan(trial.value) else float(trial.value)


def best_trial(complete: list[FrozenTrial], confirmed: dict[int, float] | None = None) -> FrozenTrial:
    """A search's winner, by the selection rule (contracts/selection.py `choose_lr`) as report/tune_frame.py reads
    the search back, so the leaderboard scores the configuration that was re-run: the lr with the best mean
    final-epoch val (a trial without one counts as none), ties to the smaller lr; among that lr's trials the best
    val, ties to the earlier trial. With confirmations (`confirmed`: search trial number -> its val on the
    confirmation seed), only the confirmed trials, each by the mean of its two seeds (a lucky search draw alone does
    not win): two confirmed trials whose means tie go to the smaller lr, as the leaderboard's rule does."""
    def value(trial: FrozenTrial) -> float:
        return math.nan if trial.value is None else trial.value

    seeds_of = {t.number: [value(t)] for t in complete}
    if confirmed:
        seeds_of = {t.number: [value(t), confirmed[t.number]] for t in complete if t.number in confirmed}
    candidates = [t for t in complete if t.number in seeds_of]
    by_lr: dict[float, list[float]] = {}
    for t in candidates:  # in trial order, each trial's seeds in the order the leaderboard's frame lists them
        by_lr.setdefault(t.params.get("lr", 0.0), []).extend(seeds_of[t.number])
    lr = choose_lr({lr: seed_mean(values) for lr, values in by_lr.items()})

    def rank(trial: FrozenTrial) -> tuple[float, int]:
        mean = seed_mean(seeds_of[trial.number])
        return (-math.inf if math.isnan(mean) else mean), -trial.number

    return max((t for t in candidates if t.params.get("lr", 0.0) == lr), key=rank)
