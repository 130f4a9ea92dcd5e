"""`normbench tune`: the same Optuna budget for every (layer, depth), then the best configuration over seeds.

One study per matrix point without seed and tuned axes (`tune:<suite>:depth=12,layer=layerscale`), with exactly
`tune.trials` slots queued up front: an equal budget however many workers share it (pruned, diverged ones count).
Searches train on `search_seed` (past the matrix's seeds), ranked by final-epoch val top-1 (contracts/selection.py);
each best config is then re-run on the matrix's seeds in `tuned:<suite>`, so its lucky draw is not counted again, and
reported by test top-1 like `normbench run`."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.names import StudyNames
from normbench.contracts.selection import choose_lr, seed_mean
from normbench.contracts.suite import Suite, TuneConfig, cell_id, with_overrides
from normbench.contracts.tuning import LABEL, search_keys, search_seed, seeds
from normbench.errors import ClaimLostError, SuiteError
from normbench.store.claim import Claim
from normbench.store.ledger import UNFINISHED, Ledger
from normbench.sweep.cells import cell_params, check_recipe, open_study_of_recipe
from normbench.sweep.plan import Job, Plan
from normbench.sweep.progress import Progress


def trial_label(key: dict[str, Any], sampled: dict[str, Any], number: int) -> str:
    """`depth=2,layer=rezero,lr=0.00316,trial=4` (floats to 3 significant digits): progress lines, MLflow run name."""
    shown = {k: float(f"{v:.3g}") if isinstance(v, float) else v for k, v in sampled.items()}
    return f"{cell_id({**key, **shown})},trial={number}"


def suggest(trial: optuna.Trial, key: str, dist: dict[str, Any]) -> Any:
    if "choices" in dist:
        return trial.suggest_categorical(key, dist["choices"])
    if isinstance(dist["low"], int) and isinstance(dist["high"], int) and not dist.get("log"):
        return trial.suggest_int(key, dist["low"], dist["high"], step=dist.get("step", 1))
    return trial.suggest_float(key, dist["low"], dist["high"], log=bool(dist.get("log", False)))


def _sampler_and_pruner(tune: TuneConfig) -> dict[str, Any]:
    sampler = (optuna.samplers.TPESampler(n_startup_trials=tune.startup_trials, seed=0) if tune.sampler == "tpe"
               else optuna.samplers.RandomSampler(seed=0))
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=tune.startup_trials, n_warmup_steps=1)
              if tune.pruner == "median" else optuna.pruners.NopPruner())
    return {"sampler": sampler, "pruner": pruner}


def open_tune(suite: Suite, ledger: Ledger, out_dir: Path, *,
              quiet: bool = False) -> tuple[Plan, list[str], Progress]:
    """Check every study's recipe and queue each search's budget; returns (jobs, studies to watch, progress)."""
    if suite.tune is None:
        raise SuiteError(f"{suite.path}: has no `tune:` section; add one with `trials:` and `space:` "
                         "(see suites/smoke.yaml)")
    tune = suite.tune
    names = StudyNames(suite.name)
    keys = search_keys(suite)
    searches = {cell_id(key): names.tune(cell_id(key)) for key in keys}
    existing = set(ledger.study_names())
    for name in [*searches.values(), names.tuned]:  # every check before any write: a refused tune changes nothing
        if name in existing:
            check_recipe(ledger, suite, ledger.study(name))
    studies = []
    for key in keys:
        study = open_study_of_recipe(ledger, suite, searches[cell_id(key)], **_sampler_and_pruner(tune))
        ledger.enqueue(study, {f"slot-{i}": {} for i in range(tune.trials)})
        studies.append((key, study))

    def search_job(key: dict[str, Any], study: optuna.Study) -> Job:
        def cell_for(claim: Claim) -> tuple[str, dict[str, Any], Any]:
            axes = {**key, "seed": search_seed(suite)}
            sampled = ledger.call(lambda: {k: suggest(claim.trial, k, d) for k, d in tune.space.items()})
            config = with_overrides(suite.cell(axes), sampled)
            label = trial_label(key, sampled, claim.number)
            with contextlib.suppress(ClaimLostError):  # a lost claim: run_cell notices it
                claim.set_attr(LABEL, label)  # for the parent of local workers, which prints it
            return label, cell_params(axes, config), config

        return Job(study=study, cell_for=cell_for, report=True)

    def rerun_job(study: optuna.Study) -> Job:
        def cell_for(claim: Claim) -> tuple[str, dict[str, Any], Any]:
            axes, overrides = claim.trial.user_attrs["axes"], claim.trial.user_attrs["overrides"]
            config = with_overrides(suite.cell(axes), overrides)
            return cell_id(axes), cell_params(axes, config), config

        return Job(study=study, cell_for=cell_for)

    def jobs() -> list[Job]:
        current = [search_job(key, study) for key, study in studies]
        return [*current, rerun_job(ledger.study(names.tuned))] if names.tuned in ledger.study_names() else current

    def queue_next() -> None:
        """Once every search is over, queue each one's best configuration on the matrix's seeds."""
        if any(ledger.trials(study, UNFINISHED) for _, study in studies):
            return
        tuned = open_study_of_recipe(ledger, suite, names.tuned)
        items, extra = {}, {}
        for key, study in studies:
            complete = ledger.trials(study, (TrialState.COMPLETE,))
            if not complete:
                continue  # every trial pruned: nothing to re-run
            best = best_trial(complete)
            for seed in seeds(suite):
                axes = {**key, "seed": seed}
                items[cell_id(axes)], extra[cell_id(axes)] = axes, {"overrides": best.params}
        ledger.enqueue(tuned, items, extra)

    progress = Progress(total=len(keys) * (tune.trials + len(seeds(suite))), quiet=quiet)
    progress.note(f"tune {suite.name}: {len(keys)} studies x {tune.trials} trials on seed {search_seed(suite)}, "
                  f"then the best of each over seed(s) {seeds(suite)}; output in {out_dir}")
    return Plan(jobs=jobs, queue_next=queue_next), [*searches.values(), names.tuned], progress


def best_trial(complete: list[FrozenTrial]) -> FrozenTrial:
    """A search's winner by the selection rule (contracts/selection.py `choose_lr`, as report/tune_frame.py reads the
    search back): the lr with the best mean final-epoch val (a trial without one counts as none), ties to the smaller
    lr; among that lr's trials the best val, ties to the earlier trial."""
    def value(trial: FrozenTrial) -> float:
        return math.nan if trial.value is None else trial.value

    by_lr: dict[float, list[float]] = {}
    for t in complete:
        by_lr.setdefault(t.params.get("lr", 0.0), []).append(value(t))
    lr = choose_lr({lr: seed_mean(values) for lr, values in by_lr.items()})
    at_lr = [t for t in complete if t.params.get("lr", 0.0) == lr]
    return max(at_lr, key=lambda t: (-math.inf if math.isnan(value(t)) else value(t), -t.number))
