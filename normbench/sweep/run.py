"""`normbench run`'s work: a suite's matrix as one study, plus lr bracketing rounds and the report stage, as jobs.

With `--bracket`, the worker finding every cell so far finished queues a round beyond the lr grid's edge (study
`bracket:<suite>:<round>`); then, with `report_seeds`, each row's chosen lr on them (`report:<suite>`,
sweep/report_stage.py). Workers compute the same cells from the same ledger and queue only new ones: each runs once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.selection import BUDGETS, REPORTS, SELECTS
from normbench.contracts.suite import Suite
from normbench.store.claim import Claim
from normbench.store.ledger import LIVE, UNFINISHED, Ledger, worker_host
from normbench.store.migrations import trial_cell_id
from normbench.sweep.bracket import bracket_axes
from normbench.sweep.cells import cell_params, open_study_of_recipe
from normbench.sweep.pace import Pace
from normbench.sweep.progress import Progress
from normbench.sweep.report_stage import budget_axes, report_axes
from normbench.sweep.worker import Job

JobList = Callable[[], list[Job]]


def open_run_study(ledger: Ledger, suite: Suite) -> optuna.Study:
    """The suite's run study, refusing to resume a ledger trained with a different recipe."""
    return open_study_of_recipe(ledger, suite, StudyNames(suite.name).run)


def run_job(suite: Suite, study: optuna.Study) -> Job:
    names = StudyNames(suite.name)
    role = {names.report: REPORTS, names.budget: BUDGETS}.get(study.study_name, SELECTS)

    def cell_for(claim: Claim) -> tuple[str, dict[str, Any], Any]:
        # The axes come from the trial's user attrs; its params show them in optuna-dashboard (store/trial_params.py).
        axes = dict(claim.trial.user_attrs["axes"])
        cell = suite.cell(axes)
        return cell.cell_id, {**cell_params(axes, cell.config), "role": role}, cell.config

    return Job(study=study, cell_for=cell_for)


def bracket_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The suite's bracketing rounds present in the ledger, in round order."""
    return StudyNames(suite.name).bracket_rounds(ledger.study_names())


def stage_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The studies queued after the matrix: bracketing rounds in order, then the report stage, those present."""
    names = StudyNames(suite.name)
    present = ledger.study_names()
    return [*names.bracket_rounds(present), *(n for n in (names.report, names.budget) if n in present)]


def queued_cells(ledger: Ledger, study_name: str) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the study's live cells."""
    return {t.user_attrs["cell_id"]: t.user_attrs["axes"]
            for t in ledger.trials(ledger.study(study_name), LIVE) if "axes" in t.user_attrs}


def suite_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The suite's studies present in the ledger: the matrix's, then its bracketing rounds and stages."""
    run = StudyNames(suite.name).run
    stages = stage_study_names(ledger, suite)
    return [run, *stages] if run in ledger.study_names() else stages


def pace_of(ledger: Ledger, suite: Suite) -> Pace:
    """How fast this host trained the suite's finished cells (matrix, bracketing rounds, report stage)."""
    trials = [t for name in suite_study_names(ledger, suite)
              for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE,))]
    return Pace.learn(trials, worker_host(), lambda axes: suite.cell(axes).config.model.depth)


def cell_costs(suite: Suite, cells: dict[str, dict[str, Any]], pace: Pace) -> dict[str, float]:
    """`{cell_id: the ETA's weight}`: each cell's cost in depth-epochs, weighed by its shape's pace here."""
    configs = {cid: suite.cell(axes).config for cid, axes in cells.items()}
    return {cid: pace.cost(cells[cid], c.model.depth, c.train.epochs) for cid, c in configs.items()}


def note_new_cells(ledger: Ledger, progress: Progress, suite: Suite, study_name: str,
                   cells: dict[str, dict[str, Any]]) -> None:
    """Count a bracketing round's or the report stage's new cells (`{cell_id: axes}`) in the progress line."""
    pace = pace_of(ledger, suite)
    progress.unit = progress.unit or pace.per_depth_epoch  # the unit of the costs queued so far, kept from then on
    progress.add(cell_costs(suite, cells, dataclasses.replace(pace, per_depth_epoch=progress.unit)))
    if study_name == StudyNames(suite.name).report:
        progress.note(f"selection over: {len(cells)} report cells (each row's chosen lr on report seeds "
                      f"{suite.report_seeds})")
    elif study_name == StudyNames(suite.name).budget:
        progress.note(f"convergence check: {len(cells)} cells (each row's chosen lr at twice the epochs)")
    else:
        progress.note(f"bracket round {study_name.rsplit(':', 1)[-1]}: {len(cells)} cells beyond the lr grid's edge")


def run_jobs(suite: Suite, study: optuna.Study, ledger: Ledger, progress: Progress | None = None) -> JobList:
    """The matrix, then bracketing rounds and report stage when due; a new study tells the worker loop there is more."""
    names = StudyNames(suite.name)

    def jobs() -> list[Job]:
        selecting = [study, *(ledger.study(n) for n in bracket_study_names(ledger, suite))]
        if not any(ledger.trials(s, UNFINISHED) for s in selecting):
            trials = [t for s in selecting for t in ledger.trials(s, LIVE)]
            finished = [(t.user_attrs["axes"], t.user_attrs.get("result", {})) for t in trials
                        if t.state == TrialState.COMPLETE]
            new = next_bracket_round(suite, finished, {t.user_attrs.get("cell_id") for t in trials})
            if new:
                selecting.append(ledger.study(names.bracket(len(selecting))))
                _queue(ledger, selecting[-1], new, suite, progress)
            elif suite.report_seeds:
                for name, stage in ((names.report, report_axes), (names.budget, budget_axes)):
                    if cells := {suite.cell(axes).cell_id: axes for axes in stage(suite, finished)}:
                        _queue(ledger, ledger.study(name), cells, suite, progress)
        present = ledger.study_names()
        after = [ledger.study(n) for n in (names.report, names.budget) if n in present]
        return [run_job(suite, s) for s in [*selecting, *after]]

    return jobs


def next_bracket_round(suite: Suite, finished: list[tuple[dict[str, Any], dict[str, Any]]],
                       present: set[str]) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the next bracketing round that are not queued yet ({} without bracketing)."""
    if not suite.bracket:
        return {}
    new = {suite.cell(axes).cell_id: axes for axes in bracket_axes(suite, finished)}
    return {cid: axes for cid, axes in new.items() if cid not in present}


def _queue(ledger: Ledger, study: optuna.Study, cells: dict[str, dict[str, Any]], suite: Suite,
           progress: Progress | None) -> None:
    """Queue the cells not queued yet in `study` and count them in the progress line."""
    present = set(queued_cells(ledger, study.study_name)) if study.study_name in ledger.study_names() else set()
    new = {cid: axes for cid, axes in cells.items() if cid not in present}
    if new:
        ledger.enqueue(study, new)
        if progress is not None:
            note_new_cells(ledger, progress, suite, study.study_name, new)


def retry_failed(suite: Suite, out_dir: Path, storage: str | None) -> list[str]:
    """`normbench run --retry-failed`: queue the suite's cells failed for good (matrix, bracketing rounds, report
    stage) for another round of attempts; returns their ids. A folder without a ledger has none (and gets none)."""
    if storage is None and not OutputFolder(out_dir).ledger.exists():
        return []
    ledger = Ledger(storage, out_dir)
    return [cid for name in suite_study_names(ledger, suite) for cid in ledger.retry_failed(ledger.study(name))]


def queue_status(suite: Suite, ledger: Ledger) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
    """(`{cell_id: axes}` of the matrix and of the rounds and stages queued so far, the ids of those finished, the
    ids of those failed for good). Writes nothing of its own (loading a study may stamp its metric name, once)."""
    queued = {c.cell_id: c.axes for c in suite.cells()}
    for name in stage_study_names(ledger, suite):  # those present
        queued.update(queued_cells(ledger, name))
    studies = [ledger.study(n) for n in suite_study_names(ledger, suite)]
    finished = {trial_cell_id(t) for s in studies
                for t in ledger.trials(s, (TrialState.COMPLETE, TrialState.PRUNED)) if "axes" in t.user_attrs}
    failed = {trial_cell_id(t) for s in studies for t in ledger.failed_for_good(s)}
    return queued, finished, failed - finished


def open_run(suite: Suite, ledger: Ledger, out_dir: Path, *,
             quiet: bool = False) -> tuple[JobList, list[str], Progress]:
    """Check the recipe, queue the matrix, count queued and done cells; returns (jobs, studies to watch, progress)."""
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    queued, finished, failed = queue_status(suite, ledger)  # with the rounds an earlier run of this suite queued
    left = {cid: axes for cid, axes in queued.items() if cid not in finished | failed}
    pace = pace_of(ledger, suite)
    progress = Progress(total=len(queued), done=len(finished), quiet=quiet, costs=cell_costs(suite, left, pace))
    progress.unit = pace.per_depth_epoch
    progress.note(f"suite {suite.name}: {len(queued)} cells ({len(queued) - len(suite.cells())} from bracketing and "
                  f"report seeds), {len(finished)} already finished; output in {out_dir}")
    return run_jobs(suite, study, ledger, progress), [study.study_name], progress


def time_left(suite: Suite, ledger: Ledger) -> str:
    """'time left: N queued cells, about H hours of one worker's training ...' at this host's pace so far; '' when
    none is left or this host has finished no cell."""
    pace = pace_of(ledger, suite)
    queued, finished, failed = queue_status(suite, ledger)
    left = {cid: axes for cid, axes in queued.items() if cid not in finished | failed}
    if not left or not pace.per_depth_epoch:
        return ""
    hours = sum(cell_costs(suite, left, pace).values()) * pace.per_depth_epoch / 3600
    return (f"time left: {len(left)} queued cells, about {hours:.1f} hours of one worker's training at this host's "
            "pace so far (each layer at the speed its cells had here; N workers side by side: divide by N; stages "
            "not queued yet are not counted)")
