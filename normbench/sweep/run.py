"""`normbench run`'s work: a suite's matrix as one study, plus lr bracketing rounds and the report stage, as jobs.

With `--bracket`, the worker finding every cell so far finished queues a round beyond the lr grid's edge (study
`bracket:<suite>:<round>`); then, with `report_seeds`, each row's chosen lr on them (`report:<suite>`,
sweep/report_stage.py). Workers compute the same cells from the same ledger and queue only new ones: each runs once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.suite import Suite
from normbench.store import attempts
from normbench.store.claim import Claim
from normbench.store.ledger import LIVE, UNFINISHED, Ledger, failed_to_retry, worker_host
from normbench.store.migrations import trial_axes, trial_cell_id
from normbench.sweep.adopt import ADOPTED, donors_of
from normbench.sweep.cells import cell_run, open_study_of_recipe
from normbench.sweep.claim_rounds import claim_round_axes
from normbench.sweep.pace import Pace, cell_costs
from normbench.sweep.plan import Job, Plan
from normbench.sweep.progress import Progress, note_adopted, note_new_cells
from normbench.sweep.report_stage import budget_axes, report_axes
from normbench.sweep.rounds import (
    SEALED,
    bracket_study_names,
    listed_in,
    next_bracket_round,
    sealed,
    seeds_by_lr,
    selection_so_far,
    withdraw_unasked,
)
from normbench.tracking.run_record import TrialRun
from normbench.train.device import device_name


def open_run_study(ledger: Ledger, suite: Suite) -> optuna.Study:
    """The suite's run study, refusing to resume a ledger trained with a different recipe."""
    return open_study_of_recipe(ledger, suite, StudyNames(suite.name).run)


def run_job(suite: Suite, study: optuna.Study) -> Job:
    def cell_for(claim: Claim) -> tuple[str, TrialRun, Any]:
        # The axes come from the trial's user attrs; its params show them in optuna-dashboard (store/trial_params.py).
        # The run's role (select, report) is its study's kind's (tracking/run_record.py KINDS), as sync reads it.
        axes = dict(claim.trial.user_attrs["axes"])
        cell = suite.cell(axes)
        return cell.cell_id, cell_run(suite, claim), cell.config

    return Job(study=study, cell_for=cell_for, listed=listed_in(suite, study.study_name))


def stage_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The studies queued after the matrix: bracketing rounds in order, then the report stage, those present."""
    names = StudyNames(suite.name)
    present = ledger.study_names()
    return [*names.bracket_rounds(present), *(n for n in (names.report, names.budget, names.claims) if n in present)]


def queued_cells(ledger: Ledger, study_name: str) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the study's live cells."""
    return {t.user_attrs["cell_id"]: t.user_attrs["axes"]
            for t in ledger.trials(ledger.study(study_name), LIVE) if "axes" in t.user_attrs}


def failed_cells(ledger: Ledger, study_name: str) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the study's cells that failed and wait for the next run (store/ledger.py
    `failed_to_retry`)."""
    return {trial_cell_id(t): t.user_attrs["axes"]
            for t in ledger.call(failed_to_retry, ledger.study(study_name)) if "axes" in t.user_attrs}


def requeue_failed(ledger: Ledger, suite: Suite) -> None:
    """Queue again the cells of the bracketing rounds and stages that failed in an earlier run, as `open_run` queues
    the matrix's: a round's cell that raised is not asked for again by the round after it, nor a report cell by
    `queue_next_stage` (it counts them as queued)."""
    for name in stage_study_names(ledger, suite):
        if cells := failed_cells(ledger, name):
            ledger.enqueue(ledger.study(name), cells)


def suite_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The suite's studies present in the ledger: the matrix's, then its bracketing rounds and stages."""
    run = StudyNames(suite.name).run
    stages = stage_study_names(ledger, suite)
    return [run, *stages] if run in ledger.study_names() else stages


def pace_of(ledger: Ledger, suite: Suite) -> Pace:
    """How fast this host trained the suite's finished cells (matrix, bracketing rounds, report stage)."""
    trials = [t for name in suite_study_names(ledger, suite)
              for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE,))]
    return Pace.learn(trials, worker_host(), lambda axes: suite.cell(axes).config.model.depth, device_name())


def run_jobs(suite: Suite, study: optuna.Study, ledger: Ledger, progress: Progress | None = None) -> Plan:
    """The matrix's, bracketing rounds' and report stage's jobs (a read); the next of them queued by `queue_next`."""
    def jobs() -> list[Job]:
        return [run_job(suite, s) for s in [study, *map(ledger.study, stage_study_names(ledger, suite))]]

    return Plan(jobs=jobs, queue_next=lambda: queue_next_stage(suite, study, ledger, progress),
                pace=lambda: pace_of(ledger, suite))


def queue_next_stage(suite: Suite, study: optuna.Study, ledger: Ledger, progress: Progress | None = None) -> None:
    """Once the matrix and the bracketing rounds so far are finished, queue the next round or, with none left, the
    report stage (writes only what is not queued yet: workers that compute it at once queue each cell once). A round
    is created, filled, then sealed: one not sealed yet (a peer is filling it, or died doing so) is filled here from
    the studies before it, never read as a finished round (that read queued its cells again as the next round)."""
    names = StudyNames(suite.name)
    rounds = [ledger.study(n) for n in bracket_study_names(ledger, suite)]
    filling = rounds[-1] if rounds and not sealed(ledger, rounds[-1]) else None
    reading = [study, *rounds[:-1]] if filling is not None else [study, *rounds]
    if (so_far := selection_so_far(suite, ledger, reading)) is None:
        return
    finished, present = so_far
    new = next_bracket_round(suite, finished, present)
    if new or filling is not None:
        target = filling or ledger.study(names.bracket(len(reading)))
        if new:
            _queue(ledger, target, new, suite, progress)
        ledger.call(target.set_user_attr, SEALED, True)
    elif suite.report_seeds:
        for name, stage in ((names.report, report_axes), (names.budget, budget_axes)):
            if cells := {suite.cell(axes).cell_id: axes for axes in stage(suite, finished)}:
                _queue(ledger, ledger.study(name), cells, suite, progress)
        if suite.claims and reports_done(ledger, suite):
            if cells := {suite.cell(axes).cell_id: axes for axes in next_claim_round(suite, ledger)}:
                _queue(ledger, ledger.study(names.claims), cells, suite, progress)


def reports_done(ledger: Ledger, suite: Suite) -> bool:
    """Is every report seed and claim round queued so far trained (or failed for good)? The claims are read only
    then: a round is asked for on the whole of the round before it."""
    names = StudyNames(suite.name)
    present = ledger.study_names()
    return not any(listed_in(suite, n)(t) for n in (names.report, names.claims) if n in present
                   for t in ledger.trials(ledger.study(n), UNFINISHED))


def next_claim_round(suite: Suite, ledger: Ledger) -> list[dict[str, Any]]:
    """The claim round's cells (sweep/claim_rounds.py) read from the suite's finished cells in the ledger."""
    from normbench.contracts.matrix_scope import MatrixScope
    from normbench.report.frames import cells_frame

    cells = cells_frame(ledger, StudyNames(suite.name), scope=MatrixScope(suite))
    return claim_round_axes(suite, cells)


def _queue(ledger: Ledger, study: optuna.Study, cells: dict[str, dict[str, Any]], suite: Suite,
           progress: Progress | None) -> None:
    """Queue the cells not queued yet in `study` and count them in the progress line (not those that failed in it:
    the next run's, `requeue_failed`)."""
    present = set()
    if study.study_name in ledger.study_names():
        present = set(queued_cells(ledger, study.study_name)) | set(failed_cells(ledger, study.study_name))
    new = {cid: axes for cid, axes in cells.items() if cid not in present}
    if new:
        donors = donors_of(suite)
        ledger.enqueue(study, new, adopt=donors)
        if progress is not None:
            adopted = donors.holding(new) if donors is not None else set()
            if to_train := {cid: axes for cid, axes in new.items() if cid not in adopted}:
                note_new_cells(progress, suite, study.study_name, to_train, pace_of(ledger, suite))
            if adopted:
                note_adopted(progress, adopted, donors)


def retry_failed(suite: Suite, out_dir: Path, storage: str | None) -> list[str]:
    """`normbench run --retry-failed`: queue the suite's cells failed for good (matrix, bracketing rounds, report
    stage) for another round of attempts; returns their ids. A folder without a ledger has none (and gets none)."""
    if storage is None and not OutputFolder(out_dir).ledger.exists():
        return []
    ledger = Ledger(storage, out_dir)
    return [cid for name in suite_study_names(ledger, suite)
            for cid in attempts.retry_failed(ledger, ledger.study(name))]


def queue_status(suite: Suite, ledger: Ledger) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
    """(`{cell_id: axes}` of the matrix and of the rounds and stages queued so far, the ids of those finished, the
    ids of those failed for good). Writes nothing of its own (loading a study may stamp its metric name, once)."""
    queued = {c.cell_id: c.axes for c in suite.cells()}
    scope = MatrixScope(suite)  # an edited matrix: only the cells it lists now count
    for name in stage_study_names(ledger, suite):  # those present
        waiting = {**failed_cells(ledger, name), **queued_cells(ledger, name)}  # the failed: the next run's
        queued.update({cid: axes for cid, axes in waiting.items() if scope.holds(name, axes)})
    studies = [ledger.study(n) for n in suite_study_names(ledger, suite)]
    finished = {trial_cell_id(t) for s in studies for t in ledger.trials(s, (TrialState.COMPLETE, TrialState.PRUNED))
                if "axes" in t.user_attrs and scope.holds(s.study_name, trial_axes(t))}
    failed = {trial_cell_id(t) for s in studies for t in ledger.call(attempts.failed_for_good, s)
              if scope.holds(s.study_name, trial_axes(t))}
    return queued, finished, failed - finished


def open_run(suite: Suite, ledger: Ledger, out_dir: Path, *,
             quiet: bool = False) -> tuple[Plan, list[str], Progress]:
    """Check the recipe, queue the matrix, count queued and done cells; returns (jobs, studies to watch, progress)."""
    donors = donors_of(suite)  # a donor folder that cannot give cells is refused before any write
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()}, adopt=donors)
    requeue_failed(ledger, suite)  # before withdrawing: a failed report cell of a selection that moved goes too
    withdrawn = withdraw_unasked(suite, ledger, study)  # before counting: they no longer count as queued
    queued, finished, failed = queue_status(suite, ledger)  # with the rounds an earlier run of this suite queued
    left = {cid: axes for cid, axes in queued.items() if cid not in finished | failed}
    pace = pace_of(ledger, suite)
    progress = Progress(total=len(queued), done=len(finished), quiet=quiet, costs=cell_costs(suite, left, pace))
    progress.unit = pace.per_depth_epoch
    progress.note(f"suite {suite.name}: {len(queued)} cells ({len(queued) - len(suite.cells())} from bracketing and "
                  f"report seeds), {len(finished)} already finished; output in {out_dir}")
    if donors is not None and (adopted := adopted_cells(ledger, suite)):
        progress.note(f"{adopted} of the finished cells adopted from {', '.join(suite.adopt_from)} (same recipe, "
                      "trained there: sweep/adopt.py)")
    if withdrawn:
        progress.note(f"withdrew {len(withdrawn)} untrained cell(s) queued under an older bracketing rule or for a "
                      "selection that no longer stands, which today's does not ask for (`run --dry-run` lists them): "
                      f"{seeds_by_lr(suite, withdrawn)}")
    return run_jobs(suite, study, ledger, progress), [study.study_name], progress


def adopted_cells(ledger: Ledger, suite: Suite) -> int:
    """How many of the suite's finished cells were copied from donor folders (sweep/adopt.py)."""
    return sum(ADOPTED in t.user_attrs for name in suite_study_names(ledger, suite)
               for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE, TrialState.PRUNED)))


def cells_left(suite: Suite, ledger: Ledger) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the suite's queued cells neither finished nor failed for good (`queue_status`)."""
    queued, finished, failed = queue_status(suite, ledger)
    return {cid: axes for cid, axes in queued.items() if cid not in finished | failed}
