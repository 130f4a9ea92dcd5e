"""A suite's lr bracketing rounds in its ledger: what the next round queues, and which queued cells no rule asks for.

Round N is queued from the finished selection cells of the matrix and rounds 1..N-1 (sweep/bracket.py). The same
reading, redone by today's code, says whether each of round N's waiting cells is still asked for: a round queued
under an older rule (or other `lr_bounds`) has its untrained cells that today's rule does not ask for withdrawn
(store/ledger.py `Ledger.withdraw`), so they neither train nor move the row's selection. So has the report stage's
where the selection it was queued for no longer stands. Cells already trained stay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.names import StudyNames
from normbench.contracts.suite import Suite
from normbench.store.ledger import LIVE, UNFINISHED, Ledger, newest_trials, withdrawn
from normbench.store.migrations import trial_axes, trial_cell_id
from normbench.sweep.bracket import bracket_axes
from normbench.sweep.report_stage import budget_axes, report_axes

SEALED = "sealed"  # study user attr of a bracketing round: every cell its reading asked for is queued in it
Finished = list[tuple[dict[str, Any], dict[str, Any]]]  # (axes, result) of finished selection cells


def listed_in(suite: Suite, study_name: str) -> Callable[[FrozenTrial], bool]:
    """Is a trial of `study_name` a cell the suite's matrix lists now? The edited-matrix rule (contracts/
    matrix_scope.py): the others are neither trained nor scored, and stay in the ledger."""
    scope = MatrixScope(suite)
    return lambda trial: scope.holds(study_name, trial_axes(trial))


def bracket_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The suite's bracketing rounds present in the ledger, in round order."""
    return StudyNames(suite.name).bracket_rounds(ledger.study_names())


def sealed(ledger: Ledger, round_study: optuna.Study) -> bool:
    """Is the round whole? Until its queuer seals it, a peer fills it rather than reading it (sweep/run.py)."""
    return bool(ledger.call(lambda: round_study.user_attrs).get(SEALED))


def selection_so_far(suite: Suite, ledger: Ledger, studies: list[optuna.Study]) -> tuple[Finished, set[str]] | None:
    """What the next round is read from: the finished selection cells of `studies` (the matrix and the rounds so far)
    and the ids of every cell queued in them (failed ones too: a seed failed for good is not asked for again; not the
    withdrawn: a later round may ask for them). None while a cell the matrix lists is unfinished."""
    listed = [(s, listed_in(suite, s.study_name)) for s in studies]
    if any(wanted(t) for s, wanted in listed for t in ledger.trials(s, UNFINISHED)):
        return None
    present = {cid for s in studies for cid, newest in newest_trials(ledger.trials(s, (*LIVE, TrialState.FAIL))).items()
               if not withdrawn(newest)}
    finished = [(t.user_attrs["axes"], t.user_attrs.get("result", {})) for s, wanted in listed
                for t in ledger.trials(s, (TrialState.COMPLETE,)) if wanted(t)]
    return finished, present


def next_bracket_round(suite: Suite, finished: Finished, present: set[str]) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the next bracketing round that are not queued yet ({} without bracketing), from the
    finished selection cells' (axes, result) and `present`, the ids of every selection cell queued so far (failed
    ones too: a seed failed for good is not asked for again); `run --dry-run` shows it too."""
    if not suite.bracket:
        return {}
    new = {suite.cell(axes).cell_id: axes for axes in bracket_axes(suite, finished, present)}
    return {cid: axes for cid, axes in new.items() if cid not in present}


def unasked_cells(suite: Suite, ledger: Ledger, run_study: optuna.Study) -> list[tuple[optuna.Study, FrozenTrial]]:
    """The waiting cells no rule asks for today: each bracketing round's that today's rule, read on the matrix and the
    rounds before it, does not ask for (a round whose earlier studies are unfinished again, after `--retry-failed` or
    an edited matrix, is not judged), then the report stage's that today's selection does not (`stale_stage_cells`)."""
    studies = [run_study, *(ledger.study(n) for n in bracket_study_names(ledger, suite))]
    unasked = []
    for i, study in enumerate(studies[1:] if suite.bracket else [], start=1):  # bracketing off: the edited-matrix
        listed = listed_in(suite, study.study_name)                          # rule decides what its rounds hold
        waiting = [t for t in ledger.trials(study, (TrialState.WAITING,)) if listed(t)]
        if not waiting or (so_far := selection_so_far(suite, ledger, studies[:i])) is None:
            continue
        asked = next_bracket_round(suite, *so_far)
        unasked += [(study, t) for t in waiting if trial_cell_id(t) not in asked]
    return unasked + stale_stage_cells(suite, ledger, studies)


def stale_stage_cells(suite: Suite, ledger: Ledger,
                      selection: list[optuna.Study]) -> list[tuple[optuna.Study, FrozenTrial]]:
    """The report stage's waiting cells (report seeds, 2x check, claim rounds) that today's selection does not ask for
    (a claim round's: those off a row's chosen lr; its seeds were asked for by the claims then). The stage
    was queued when selection was over; where it reopened since (more seeds, an edited matrix, `--retry-failed`),
    every waiting one, since the lr they would train may move; once it is over again, those off a row's chosen lr or
    seeds. The stage queues what is asked for again once selection is over (sweep/run.py `queue_next_stage`)."""
    names = StudyNames(suite.name)
    stages = [ledger.study(n) for n in (names.report, names.budget, names.claims) if n in ledger.study_names()]
    waiting = [(s, t) for s in stages for t in ledger.trials(s, (TrialState.WAITING,))
               if listed_in(suite, s.study_name)(t)]  # the edited-matrix rule leaves the others where they are
    if not waiting:
        return []
    so_far = selection_so_far(suite, ledger, selection)
    asked: set[str] = set()
    if so_far is not None and not next_bracket_round(suite, *so_far):
        finished = so_far[0]
        asked = {suite.cell(axes).cell_id for axes in (*report_axes(suite, finished), *budget_axes(suite, finished))}
        rounds = {suite.cell(without_seed(axes)).cell_id for axes in report_axes(suite, finished)}
        asked |= {trial_cell_id(t) for s, t in waiting if s.study_name == names.claims  # a claim round asked for
                  and suite.cell(without_seed(trial_axes(t))).cell_id in rounds}      # it at a chosen lr: it stands
    return [(s, t) for s, t in waiting if trial_cell_id(t) not in asked]


def without_seed(axes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in axes.items() if k != "seed"}


def withdraw_unasked(suite: Suite, ledger: Ledger, run_study: optuna.Study) -> list[dict[str, Any]]:
    """Withdraw `unasked_cells`; returns the axes of those this call withdrew (a worker may have claimed one first)."""
    names = StudyNames(suite.name)

    def why(study_name: str) -> str:
        if (round_ := names.bracket_round(study_name)) is not None:
            return (f"queued in bracket round {round_} under an older rule: today's rule, read on the rounds before "
                    "it, does not ask for it")
        return ("queued by the report stage for a selection that no longer stands: it reopened or chose otherwise "
                "since, and the stage queues what it asks for once selection is over")

    return [trial_axes(t) for study, t in unasked_cells(suite, ledger, run_study)
            if ledger.withdraw(study, t, why(study.study_name))]


def seeds_by_lr(suite: Suite, cells: list[dict[str, Any]]) -> str:
    """`cells` (axes) in a line: each row's lrs with their seeds, e.g. "layer=mhc, lr=0.009986 (seeds 0, 1)"."""
    groups: dict[str, list[str]] = {}
    for axes in cells:
        key = ", ".join(f"{k}={axes.get(k)}" for k in (*suite.row_axes(), "lr"))
        groups.setdefault(key, []).append(str(axes.get("seed")))
    return "; ".join(f"{key} (seeds {', '.join(sorted(seeds))})" for key, seeds in groups.items())
