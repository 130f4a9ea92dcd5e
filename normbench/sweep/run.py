"""`normbench run`'s work: a suite's matrix as one study, plus lr bracketing rounds, as the jobs a worker consumes.

With bracketing (`--bracket`), cells beyond the lr grid's edge are queued in rounds, each its own study
`bracket:<suite>:<round>` in the same ledger, by whichever worker finds every cell so far finished. Every worker
computes the same round from the same ledger, and a cell already queued anywhere is not queued again, so each
runs once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from normbench.spec.names import StudyNames
from normbench.spec.suite import Suite
from normbench.store.ledger import LIVE, UNFINISHED, Ledger
from normbench.store.migrations import trial_cell_id
from normbench.sweep.bracket import bracket_axes
from normbench.sweep.cells import cell_params, open_study_of_recipe
from normbench.sweep.progress import Progress
from normbench.sweep.worker import Job

JobList = Callable[[], list[Job]]


def open_run_study(ledger: Ledger, suite: Suite) -> optuna.Study:
    """The suite's run study, refusing to resume a ledger trained with a different recipe."""
    return open_study_of_recipe(ledger, suite, StudyNames(suite.name).run)


def run_job(suite: Suite, study: optuna.Study) -> Job:
    def cell_for(trial: optuna.Trial) -> tuple[str, dict[str, Any], Any]:
        # The axes come from the trial's user attrs; its params show them in optuna-dashboard (store/trial_params.py).
        axes = dict(trial.user_attrs["axes"])
        cell = suite.cell(axes)
        return cell.cell_id, cell_params(axes, cell.config), cell.config

    return Job(study=study, cell_for=cell_for)


def bracket_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The suite's bracketing rounds present in the ledger, in round order."""
    return StudyNames(suite.name).bracket_rounds(ledger.study_names())


def queued_cells(ledger: Ledger, study_name: str) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the study's live cells."""
    return {t.user_attrs["cell_id"]: t.user_attrs["axes"]
            for t in ledger.study(study_name).get_trials(deepcopy=False, states=LIVE) if "axes" in t.user_attrs}


def cell_cost(suite: Suite, axes: dict[str, Any]) -> float:
    """A cell's relative cost for the ETA: depth x epochs."""
    config = suite.cell(axes).config
    return float(config.model.depth * config.train.epochs)


def note_bracket_round(progress: Progress, suite: Suite, study_name: str, cells: dict[str, dict[str, Any]]) -> None:
    """Count a new bracketing round's cells (`{cell_id: axes}`) in the progress line's total and ETA."""
    progress.add({cid: cell_cost(suite, axes) for cid, axes in cells.items()})
    progress.note(f"bracket round {study_name.rsplit(':', 1)[-1]}: {len(cells)} cells beyond the lr grid's edge")


def run_jobs(suite: Suite, study: optuna.Study, ledger: Ledger, progress: Progress | None = None) -> JobList:
    """The job list a worker consumes: the matrix, plus (when `suite.bracket`) a round of cells beyond each edge
    lr, queued when every cell so far has finished; a new round is a new study, which tells the worker loop there
    is more to do."""
    names = StudyNames(suite.name)

    def jobs() -> list[Job]:
        studies = [study, *(ledger.study(n) for n in bracket_study_names(ledger, suite))]
        if suite.bracket and not any(s.get_trials(deepcopy=False, states=UNFINISHED) for s in studies):
            trials = [t for s in studies for t in s.get_trials(deepcopy=False, states=LIVE)]
            finished = [(t.user_attrs["axes"], t.user_attrs.get("result", {})) for t in trials
                        if t.state == TrialState.COMPLETE]
            present = {t.user_attrs.get("cell_id") for t in trials}
            new = {suite.cell(axes).cell_id: axes for axes in bracket_axes(suite, finished)}
            new = {cid: axes for cid, axes in new.items() if cid not in present}
            if new:
                studies.append(ledger.study(names.bracket(len(studies))))
                ledger.enqueue(studies[-1], new)
                if progress is not None:
                    note_bracket_round(progress, suite, studies[-1].study_name, new)
        return [run_job(suite, s) for s in studies]

    return jobs


def open_run(suite: Suite, ledger: Ledger, out_dir: Path, *,
             quiet: bool = False) -> tuple[JobList, list[str], Progress]:
    """Check the recipe, queue the matrix, and count what is queued and finished (earlier bracketing rounds too).
    Returns the job list, the studies to watch and the progress line."""
    study = open_run_study(ledger, suite)
    cells = suite.cells()
    ledger.enqueue(study, {c.cell_id: c.axes for c in cells})
    rounds = bracket_study_names(ledger, suite)  # queued by an earlier run of this suite: counted too
    queued = {c.cell_id: c.axes for c in cells}
    for name in rounds:
        queued.update(queued_cells(ledger, name))
    finished = {trial_cell_id(t) for s in [study, *map(ledger.study, rounds)]
                for t in s.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if "axes" in t.user_attrs}
    costs = {cid: cell_cost(suite, axes) for cid, axes in queued.items() if cid not in finished}
    progress = Progress(total=len(queued), done=len(finished), quiet=quiet, costs=costs)
    progress.note(f"suite {suite.name}: {len(queued)} cells ({len(queued) - len(cells)} from bracketing), "
                  f"{len(finished)} already finished; output in {out_dir}")
    return run_jobs(suite, study, ledger, progress), [study.study_name], progress
