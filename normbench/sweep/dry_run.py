"""`normbench run --dry-run`: a suite's cells and status, bracketing rounds run and next; trains and writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.contracts.matrix_scope import WHY, MatrixScope
from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.selection import BUDGETS, REPORTS, SELECTS
from normbench.contracts.suite import BUDGET_FACTOR, BUDGET_SEEDS, Suite

if TYPE_CHECKING:
    from normbench.sweep.adopt import Donors

WITHDRAWN = "withdrawn"  # a status: a queued cell no rule asks for any more (sweep/rounds.py)


def dry_run_report(suite: Suite, out: Path, storage: str | None) -> str:
    """The table of cells (matrix, earlier bracketing rounds, the next round) and a summary line."""
    import pandas as pd
    from tabulate import tabulate

    from normbench.report.frames import FAILED, LEFT_OUT
    from normbench.sweep.adopt import donors_of

    frame, queued, left = pd.DataFrame(), {}, ""
    to_run = {c.cell_id: c.axes for c in suite.cells()}  # no ledger yet: every cell of the matrix
    donors = donors_of(suite)  # cells the next run copies instead of training (sweep/adopt.py)
    if storage or OutputFolder(out).ledger.exists():
        from optuna.trial import TrialState

        from normbench.report.frames import cells_frame
        from normbench.store.ledger import UNFINISHED, Ledger
        from normbench.store.migrations import trial_axes, trial_cell_id
        from normbench.sweep.pace import time_left
        from normbench.sweep.run import cells_left, pace_of, stage_study_names

        ledger, scope = Ledger(storage, out), MatrixScope(suite)  # only the cells the matrix lists now count
        frame, to_run = cells_frame(ledger, StudyNames(suite.name), scope=scope), cells_left(suite, ledger)
        queued = {trial_cell_id(t): f"{'running' if t.state == TrialState.RUNNING else 'to run'} "
                                    f"({stage_words(suite, name)})"
                  for name in stage_study_names(ledger, suite) for t in ledger.trials(ledger.study(name), UNFINISHED)
                  if scope.holds(name, trial_axes(t))}
        queued.update(failed_stage_cells(suite, ledger, scope))
        withdrawn = withdrawn_cells(suite, ledger)
        queued.update(withdrawn)
        to_run = {cid: axes for cid, axes in to_run.items() if cid not in withdrawn}
        to_run = not_adopted(to_run, donors)
        left = time_left(suite, to_run, pace_of(ledger, suite))
    else:
        to_run = not_adopted(to_run, donors)
    records = frame.to_dict("records")
    done = {r["cell_id"]: r["status"] for r in records}
    failed = {c["cell_id"]: len(c["attempts"]) for c in frame.attrs.get(FAILED, [])}  # not "to run": never queued
    rows = [[c.cell_id, done.get(c.cell_id) or failed_status(failed.get(c.cell_id))] for c in suite.cells()]
    rows += [[r["cell_id"], f"{r['status']} (bracket round {r['bracket_round']})"] for r in records
             if r["bracket_round"] > 0]
    rows += [[r["cell_id"], f"{r['status']} (report seed)"] for r in records if r.get("role") == REPORTS]
    rows += [[r["cell_id"], f"{r['status']} (convergence check, 2x epochs)"] for r in records
             if r.get("role") == BUDGETS]
    listed = {row[0] for row in rows}  # the queued cells of rounds and stages no worker has finished yet
    rows += [[cid, status] for cid, status in queued.items() if cid not in listed and cid not in failed]
    selecting = [r for r in records if r.get("role") == SELECTS]
    idle = not any(status.startswith(("to run", "running")) for _, status in rows)  # a next round is due
    if idle:  # what the next bracketing round would queue, from the finished selection cells (sweep/run.py's rule)
        from normbench.sweep.rounds import next_bracket_round

        finished = [({k: r[k] for k in suite.matrix}, r) for r in selecting]
        coming = next_bracket_round(suite, finished, {cid for cid, status in rows if not status.startswith(WITHDRAWN)})
        rows += [[cid, "to run (next bracket round)"] for cid in coming]
    if donors is not None:
        rows = [[cid, adopted_status(donors, cid) if status.startswith("to run") and donors(cid) else status]
                for cid, status in rows]
    gave_up = (f", {len(failed)} failed for good (`normbench run --retry-failed` gives them another round)"
               if failed else "")
    left_out = frame.attrs.get(LEFT_OUT, 0)
    dropped = f"; {left_out} finished cell(s) of the ledger left out: {WHY}" if left_out else ""
    lines = [tabulate(rows, headers=["cell", "status"], tablefmt="simple"),
             f"{len(rows)} cells, {len(done)} finished{gave_up}{withdrawn_words(rows)}{adopted_words(rows)}; output "
             f"folder {out}{dropped}"]
    if suite.bracket:
        cap = f", at most bracket_max_steps={suite.bracket_max_steps} per end" if suite.bracket_max_steps else ""
        lines.append("bracketing v3 on: when the cells above have finished, each row whose val-selected lr is the "
                     "smallest or largest tried gets cells one grid step beyond it, and each row at chance or flat "
                     f"across its lrs gets cells half a decade beyond both ends (within lr_bounds "
                     f"[{suite.lr_bounds[0]:g}, {suite.lr_bounds[1]:g}]{cap}); a row whose earlier lrs lack some of "
                     "the selection seeds gets those first")
    if suite.report_seeds:
        rows_count = len({tuple(c.axes.get(k) for k in suite.row_axes()) for c in suite.cells()})
        lines.append(f"report seeds {suite.report_seeds}: once selection is over, each of the {rows_count} rows' "
                     f"chosen lr is trained on every report seed ({rows_count * len(suite.report_seeds)} cells); "
                     "they alone give the scores")
    if suite.budget_check:
        lines.append(f"convergence check: then each row's chosen lr on report seeds {suite.report_seeds[:BUDGET_SEEDS]}"
                     f" at {BUDGET_FACTOR}x the epochs (schedule stretched); a row is converged when that changes its "
                     "val by less than the threshold the leaderboard states")
    if suite.claims and suite.report_seeds and len(extra := suite.claim_seeds()[len(suite.report_seeds):]) > 0:
        rounds = -(-len(extra) // len(suite.report_seeds))
        lines.append(f"claim rounds: then each claim still open that more seeds could decide gets the next "
                     f"{len(suite.report_seeds)} report seeds for both its rows, up to {rounds} round"
                     f"{'s' * (rounds != 1)} (seeds {extra}; `sequential.max_seeds` {suite.sequential.max_seeds}), "
                     "not counted in the time below")
    if not left:  # no cell finished on this host yet: the cost of a step measured here, or what is missing
        left = time_left_from_steps(suite, out, to_run)
    return "\n".join([*lines, left] if left else lines)


def time_left_from_steps(suite: Suite, out: Path, left: dict[str, dict[str, Any]]) -> str:
    """The time the cells `left` take at the train step `normbench bench SUITE --out OUT` measured for this suite
    (OUT/cost-*.csv, the newest file), or what is missing to tell; '' with none left."""
    if not left:
        return ""
    import pandas as pd

    from normbench.report.cost import COST_GLOB
    from normbench.sweep.pace import step_time_left

    bench = f"normbench bench {suite.path}" + ("" if out == OutputFolder.default_path(suite.name) else f" --out {out}")
    files = [p for p in sorted(Path(out).glob(COST_GLOB), key=lambda p: p.stat().st_mtime)
             if {"suite", "layer", "depth", "step_ms"} <= set(pd.read_csv(p, nrows=0).columns)]
    steps = pd.read_csv(files[-1]) if files else pd.DataFrame()
    steps = steps[steps["suite"].astype(str) == suite.name] if not steps.empty else steps
    if steps.empty:
        return (f"time left: not known yet: no cell of this suite has finished on this host, and {out} holds no train "
                f"step measured for it; `{bench}` measures one per layer and depth")
    from normbench.data import split_sizes

    step_ms = {(str(r.layer), int(r.depth)): float(r.step_ms) for r in steps.itertuples()}
    return step_time_left(suite, left, step_ms, lambda config: split_sizes(config.data)["train_size"],
                          files[-1].name, bench)


def not_adopted(cells: dict[str, dict[str, Any]], donors: Donors | None) -> dict[str, dict[str, Any]]:
    """`cells` less those a donor folder finished: the next run copies them, so they take no time here."""
    held = donors.holding(cells) if donors is not None else set()
    return {cid: axes for cid, axes in cells.items() if cid not in held}


def adopted_status(donors: Donors, cell_id: str) -> str:
    """A waiting cell a donor folder finished: copied, not trained, by the next run."""
    return f"adopted from {donors.sources({cell_id})} by the next run (trained there under this recipe)"


def adopted_words(rows: list[list[str]]) -> str:
    """`, 24 to be adopted from donor folders` when the next run copies some cells (`adopted_status`)."""
    adopted = sum(status.startswith("adopted from") for _, status in rows)
    return f", {adopted} to be adopted from donor folders (not trained)" if adopted else ""


def withdrawn_words(rows: list[list[str]]) -> str:
    """The summary's count of withdrawn cells (`withdrawn_cells`): none trains, none is counted as left."""
    gone = sum(status.startswith(WITHDRAWN) for _, status in rows)
    return (f", {gone} withdrawn (queued under an older bracketing rule or selection; not trained, not left)"
            if gone else "")


def withdrawn_cells(suite: Suite, ledger: Any) -> dict[str, str]:
    """Status of the bracketing rounds' and the report stage's cells withdrawn (store/ledger.py `withdraw`) or to be
    withdrawn at the next run (sweep/rounds.py `unasked_cells`: queued under an older rule or selection, untrained,
    not asked for by today's)."""
    from normbench.store.ledger import LIVE, withdrawn
    from normbench.store.migrations import trial_cell_id
    from normbench.sweep.rounds import bracket_study_names, unasked_cells

    statuses = {}
    names = StudyNames(suite.name)
    later = [n for n in (names.report, names.claims, names.budget) if n in ledger.study_names()]
    rounds = [ledger.study(name) for name in (*bracket_study_names(ledger, suite), *later)]
    live = {trial_cell_id(t) for study in rounds for t in ledger.trials(study, LIVE)}  # queued again since
    for study in rounds:
        words = stage_words(suite, study.study_name)
        older = "an older rule" if names.bracket_round(study.study_name) is not None else "an older selection"
        for t in ledger.trials(study):
            if withdrawn(t) and trial_cell_id(t) not in live:
                statuses[trial_cell_id(t)] = f"{WITHDRAWN} ({words}: queued under {older})"
    run = StudyNames(suite.name).run
    if run in ledger.study_names():
        statuses.update({trial_cell_id(t): f"{WITHDRAWN} at the next run ({stage_words(suite, study.study_name)}: "
                                           "today's rule does not ask for it)"
                         for study, t in unasked_cells(suite, ledger, ledger.study(run))})
    return statuses


def failed_stage_cells(suite: Suite, ledger: Any, scope: MatrixScope) -> dict[str, str]:
    """`{cell_id: status}` of the rounds' and stages' cells that raised (store/ledger.py `failed_to_retry`): to run,
    once the next run queues them again."""
    from normbench.store.ledger import failed_to_retry
    from normbench.store.migrations import trial_axes, trial_cell_id
    from normbench.sweep.run import stage_study_names

    return {trial_cell_id(t): f"to run ({stage_words(suite, name)}; failed here, queued again by the next run: "
                              f"{str(t.user_attrs.get('error', 'its worker was lost'))[:80]})"
            for name in stage_study_names(ledger, suite) for t in ledger.call(failed_to_retry, ledger.study(name))
            if scope.holds(name, trial_axes(t))}


def stage_words(suite: Suite, study_name: str) -> str:
    """How the cell list names the cells of a round or stage."""
    names = StudyNames(suite.name)
    if (round_ := names.bracket_round(study_name)) is not None:
        return f"bracket round {round_}"
    if study_name == names.claims:
        return "claim round: more report seeds"
    return "report seed" if study_name == names.report else "convergence check, 2x epochs"


def failed_status(attempts: int | None) -> str:
    """A matrix cell's status when it has no result: failed for good after `attempts`, or still to run."""
    return "to run" if attempts is None else f"failed for good ({attempts} attempts)"

