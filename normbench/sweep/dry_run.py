"""`normbench run --dry-run`: a suite's cells and status, bracketing rounds run and next; trains and writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.selection import BUDGETS, REPORTS, SELECTS
from normbench.contracts.suite import BUDGET_FACTOR, BUDGET_SEEDS, Suite
from normbench.sweep.bracket import bracket_axes


def dry_run_report(suite: Suite, out: Path, storage: str | None) -> str:
    """The table of cells (matrix, earlier bracketing rounds, the next round) and a summary line."""
    import pandas as pd
    from tabulate import tabulate

    from normbench.report.frames import FAILED

    frame, queued, left = pd.DataFrame(), {}, ""
    if storage or OutputFolder(out).ledger.exists():
        from optuna.trial import TrialState

        from normbench.report.frames import cells_frame
        from normbench.store.ledger import UNFINISHED, Ledger
        from normbench.store.migrations import trial_cell_id
        from normbench.sweep.run import stage_study_names, time_left

        ledger = Ledger(storage, out)
        frame, left = cells_frame(ledger, StudyNames(suite.name)), time_left(suite, ledger)
        queued = {trial_cell_id(t): f"{'running' if t.state == TrialState.RUNNING else 'to run'} "
                                    f"({stage_words(suite, name)})"
                  for name in stage_study_names(ledger, suite) for t in ledger.trials(ledger.study(name), UNFINISHED)}
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
    coming = next_bracket_round(suite, selecting) if suite.bracket and idle else []
    rows += [[suite.cell(axes).cell_id, "to run (next bracket round)"] for axes in coming]
    gave_up = (f", {len(failed)} failed for good (`normbench run --retry-failed` gives them another round)"
               if failed else "")
    lines = [tabulate(rows, headers=["cell", "status"], tablefmt="simple"),
             f"{len(rows)} cells, {len(done)} finished{gave_up}; output folder {out}"]
    if suite.bracket:
        lines.append("bracketing on: when the cells above have finished, each row whose val-selected lr is the "
                     "smallest or largest tried gets cells one grid step beyond it "
                     f"(at most bracket_max_steps={suite.bracket_max_steps} per end)")
    if suite.report_seeds:
        rows_count = len({tuple(c.axes.get(k) for k in suite.row_axes()) for c in suite.cells()})
        lines.append(f"report seeds {suite.report_seeds}: once selection is over, each of the {rows_count} rows' "
                     f"chosen lr is trained on every report seed ({rows_count * len(suite.report_seeds)} cells); "
                     "they alone give the scores")
    if suite.budget_check:
        lines.append(f"convergence check: then each row's chosen lr on report seeds {suite.report_seeds[:BUDGET_SEEDS]}"
                     f" at {BUDGET_FACTOR}x the epochs (schedule stretched); a row is converged when that changes its "
                     "val by less than the threshold the leaderboard states")
    return "\n".join([*lines, left] if left else lines)


def stage_words(suite: Suite, study_name: str) -> str:
    """How the cell list names the cells of a round or stage."""
    names = StudyNames(suite.name)
    if (round_ := names.bracket_round(study_name)) is not None:
        return f"bracket round {round_}"
    return "report seed" if study_name == names.report else "convergence check, 2x epochs"


def failed_status(attempts: int | None) -> str:
    """A matrix cell's status when it has no result: failed for good after `attempts`, or still to run."""
    return "to run" if attempts is None else f"failed for good ({attempts} attempts)"


def next_bracket_round(suite: Suite, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells the next bracketing round would queue, from the finished cells (matrix and earlier rounds)."""
    finished = [({k: r[k] for k in suite.matrix}, r) for r in records]
    return bracket_axes(suite, finished)
