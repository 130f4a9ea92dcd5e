"""`--select-only`: a run that trains the cells that choose (the matrix, its bracketing rounds, tune's searches and
confirmations) and none that score the folder (report seeds, the 2x check, claim rounds, tune's re-runs), which stay
queued for a run without the flag. How a lent GPU helps a CPU folder choose its lrs while every cell a comparison
pairs, in the folder or across folders, stays on the device class of the cells it is paired with (docs/protocol.md
"Devices"; scripts/gpu-lease.sh)."""

from __future__ import annotations

from optuna.trial import TrialState

from normbench.contracts.names import SCORING, study_kind, study_suite
from normbench.contracts.suite import Suite
from normbench.contracts.tuning import search_keys, seeds
from normbench.errors import SuiteError
from normbench.store.ledger import Ledger
from normbench.sweep.plan import Plan
from normbench.sweep.progress import Progress
from normbench.sweep.rounds import listed_in


def check_select_only(suite: Suite, mode: str) -> None:
    """Refuse (SuiteError, exit 2) a `run --select-only` of a suite without `report_seeds`: its selection cells are
    the ones that score it, so the flag would leave nothing to another device and train the scores here."""
    if mode == "run" and not suite.report_seeds:
        raise SuiteError(f"{suite.path}: --select-only leaves the cells that score a folder to another run, but this "
                         "suite has no `report_seeds`: its selection cells score it. Run it without --select-only, "
                         "on the device its scores should come from.")


def choosing_only(plan: Plan) -> Plan:
    """The plan's jobs less the studies whose cells score the folder. Its stages are still queued as they come due,
    for the run without the flag that trains them."""
    return Plan(jobs=lambda: [j for j in plan.jobs() if study_kind(j.study.study_name) not in SCORING],
                queue_next=plan.queue_next, pace=plan.pace)


def scoring_cells_left(ledger: Ledger, suite: Suite) -> int:
    """The suite's queued cells that score the folder, waiting for a run without the flag (those its matrix lists)."""
    return len(scoring_cells_waiting(ledger, suite))


def scoring_cells_waiting(ledger: Ledger, suite: Suite) -> list[str]:
    """The cell ids of `scoring_cells_left`."""
    return [trial.user_attrs.get("cell_id", f"trial {trial.number}")
            for name in ledger.study_names() if study_suite(name) == suite.name and study_kind(name) in SCORING
            for trial in ledger.trials(ledger.study(name), (TrialState.WAITING,)) if listed_in(suite, name)(trial)]


def leave_out_scoring(progress: Progress, ledger: Ledger, suite: Suite, mode: str) -> None:
    """The progress line and its ETA count only the cells a `--select-only` run trains: the scoring cells queued
    now are taken out, and a scoring stage queued later is only said. `tune` counts its re-runs up front (one per
    search and re-run seed, queued or not), so those are taken out whole."""
    progress.uncounted = frozenset(SCORING)
    if mode == "tune":
        progress.leave_out(len(search_keys(suite)) * len(seeds(suite)))
    else:
        waiting = scoring_cells_waiting(ledger, suite)
        progress.leave_out(len(waiting), waiting)
