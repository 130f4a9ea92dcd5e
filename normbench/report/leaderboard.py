"""Ledger -> pandas -> results.csv, history.csv, leaderboard.md and figures. Regenerable any time with
`normbench leaderboard`.

The protocol (docs/protocol.md): the selection seeds choose each row's lr on val (contracts/selection.py), the report
seeds score it on test; learning speed, convergence, lr sensitivity, failure rate and Holm-adjusted comparisons are
reported beside the final accuracy (report/analysis.py computes them, header.py and sections.py format them). This
module reads the ledger and writes the files.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import TrialState

from normbench.contracts.bracketing import DEFAULT_LR_BOUNDS
from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.names import OutputFolder, StudyNames, study_suite, suites_in
from normbench.contracts.selection import add_scores, chosen_lrs
from normbench.contracts.suite import DEFAULT_TARGETS, Suite
from normbench.errors import NormbenchError
from normbench.report.analysis import Analysis, analyse
from normbench.report.ceiling import ceiling_line, read_or_compute_ceiling
from normbench.report.frames import FAILED, cells_frame, history_frame
from normbench.report.header import header
from normbench.report.sections import failed_section, run_sections
from normbench.report.tables import markdown_table, rankings_table, transfer_table, tuned_table
from normbench.report.telemetry_figures import telemetry_section
from normbench.report.transfer import RESAMPLES, ranking_transfer
from normbench.report.tune_frame import tune_cells, with_tuned_values
from normbench.store.ledger import Ledger

UNWRITTEN = ["history", "telemetry"]  # per-epoch and per-block lists: history.csv and the figures hold them


def write_leaderboard(out_dir: Path, *, suite: Suite | None, storage: str | None = None,
                      reference: str | Path | None = None) -> Path:
    """Write results.csv, history.csv, leaderboard.md and the figures into `out_dir` (MLflow's parent run gets them
    from `normbench sync`, tracking/sync.py, which `run` and `leaderboard` call after this).

    `reference` (default: the suite's `reference:`) is another suite's output folder: the leaderboard then says
    whether its layer ranking holds here, and transfer.csv is written.
    """
    folder = OutputFolder(out_dir)
    out_dir = folder.path
    if storage is None and not folder.ledger.exists():  # opening it would leave an empty ledger.journal behind
        raise NormbenchError(f"{out_dir}: no ledger here ({folder.LEDGER}); run the suite first (`normbench run "
                             "SUITE.yaml --out FOLDER`), or point at its output folder (and pass --storage if it ran "
                             "on a shared database). Nothing was written.")
    ledger = Ledger(storage, out_dir)
    names = StudyNames(suite.name if suite else _single_suite_name(ledger))
    cells = _with_recipe_columns(cells_frame(ledger, names, scope=MatrixScope(suite) if suite else None), suite)
    tuned = with_tuned_values(cells_frame(ledger, names, tuned=True))
    # --reference replaces the first (the ranking transfer's); the later ones still give tuned rows their grid lr
    references = [Path(r) for r in suite.references] if suite else []
    if reference is not None:
        references = [Path(reference), *references[1:]]
    tune_folder = cells.empty and not tuned.empty and suite is not None and suite.tune is not None
    if tune_folder:  # `normbench tune` alone
        cells = _with_recipe_columns(tune_cells(ledger, names, suite, tuned.copy()), suite)
    tuned = _with_recipe_columns(tuned, suite)
    analysis = _analyse(cells, suite) if not cells.empty else None
    if analysis is not None:
        analysis.all_cells.drop(columns=UNWRITTEN, errors="ignore").to_csv(folder.results, index=False)
        analysis.history.to_csv(folder.history, index=False)
    ceiling = _ceiling(folder, suite)
    lines = header(suite, cells, analysis, ceiling, newest_record(ledger, names))
    if analysis is None:  # the cells failed for good all the same: the run's exit line sends the user here
        lines += [*failed_section(cells.attrs.get(FAILED, [])), "No finished cells yet."]
    else:
        lines += run_sections(analysis, suite, out_dir, tuned=tune_folder)
        if references:
            lines += transfer_section(analysis.cells, references[0], out_dir)
    if not tuned.empty:
        lines += tuned_section(tuned, suite, references)
    lines += tuning_budget_section(ledger, names)
    lines += importance_section(ledger, names)
    # further sections (e.g. telemetry figures) append to `lines` here, before it is written
    lines += telemetry_section(cells, out_dir, order=suite.layers() if suite else None)
    path = folder.leaderboard
    path.write_text("\n".join(lines))
    return path


FIGURES = (".png", ".svg")


def folder_files(out_dir: Path) -> dict[str, int]:
    """{file name: mtime in ns} of the folder's files: taken before `write_leaderboard`, `written_line` says after
    what it wrote (a file rewritten has a new mtime even when its bytes are the same)."""
    return {p.name: p.stat().st_mtime_ns for p in Path(out_dir).iterdir() if p.is_file()}


def written_line(out_dir: Path, before: dict[str, int]) -> str:
    """`wrote into results/smoke/: leaderboard.md, results.csv, history.csv and 34 figure files (.png, .svg)`."""
    written = sorted(name for name, mtime in folder_files(out_dir).items() if before.get(name) != mtime)
    first = [OutputFolder.LEADERBOARD] if OutputFolder.LEADERBOARD in written else []
    named = [*first, *(n for n in written if n not in first and not n.endswith(FIGURES))]
    figures = len(written) - len(first) - len(named[len(first):])
    if figures:
        named.append(f"{figures} figure file{'s' if figures != 1 else ''} ({', '.join(FIGURES)})")
    listed = ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else "".join(named) or "nothing"
    return f"wrote into {Path(out_dir)}/: {listed}"


def newest_record(ledger: Ledger, names: StudyNames) -> datetime.datetime | None:
    """The newest start or end of any trial of the suite's studies, in UTC (naive): the leaderboard's date, the same
    on every machine that reads the ledger (Optuna hands a journal's UTC times back in the reader's local time)."""
    studies = [ledger.call(optuna.load_study, study_name=name, storage=ledger.storage)  # loading writes nothing
               for name in ledger.study_names() if study_suite(name) == names.suite]
    times = [when for study in studies for t in ledger.trials(study)
             for when in (t.datetime_start, t.datetime_complete) if when]
    if not times:
        return None
    return max(times).astimezone(datetime.timezone.utc).replace(tzinfo=None)


def _analyse(cells: pd.DataFrame, suite: Suite | None) -> Analysis:
    train = suite.cell({}).config.train if suite else None
    axes = list(suite.matrix) if suite else [c for c in ("depth", "layer", "lr", "seed") if c in cells]
    keys = [*dict.fromkeys([*axes, "depth", "layer", "lr", "seed"])]
    history = history_frame(cells, [k for k in keys if k in cells])
    return analyse(cells, history, matrix_axes=axes, targets=list(suite.targets if suite else DEFAULT_TARGETS),
                   smoothing=train.label_smoothing if train else None,
                   soft_targets=bool(train and (train.mixup > 0 or train.cutmix > 0)),
                   lr_grid=suite.lr_grid if suite else None,
                   bracket_max_steps=suite.bracket_max_steps if suite else None,
                   bracketing=bool(suite and suite.bracket),
                   lr_bounds=suite.lr_bounds if suite else DEFAULT_LR_BOUNDS,
                   lr_lattice=suite.lr_lattice if suite else None)


def _ceiling(folder: OutputFolder, suite: Suite | None) -> str | None:
    """The data-ceiling line: computed once per output folder (ceiling.csv), then read."""
    if suite is None:
        return None
    return ceiling_line(read_or_compute_ceiling(folder, suite.dataset), suite.dataset)


TRANSFER_DEFINITION = (f"score = test top-1 (%) at each suite's own val-selected lr, mean over seeds (as above); "
                       "rho = Spearman's rank correlation over the layers both suites ran at a depth (ties get "
                       f"average ranks); 95% interval = percentile bootstrap, {RESAMPLES} resamples of the seeds with "
                       "replacement within each layer's selected lr, each suite independently, the selected lrs kept "
                       "fixed; 'all' = the mean of the per-depth rhos, its interval from the same resamples; holds: "
                       "the interval lies above 0, reversed: below 0, else not settled")


def tuned_section(tuned: pd.DataFrame, suite: Suite | None, references: list[Path]) -> list[str]:
    """The tuned rows; with reference grid folders, each tuned lr beside the lr the first of them that has the row
    selected for it (a row from a later folder says which)."""
    grid_lrs: dict[tuple[str, int], float] = {}
    from_later: dict[tuple[str, int], str] = {}
    problems, read = [], []
    for n, reference in enumerate(references):
        there, problem = _reference_cells(reference)
        if problem is not None:
            problems.append(problem)
            continue
        read.append(f"`{reference}`")
        for r in chosen_lrs(there, ["layer", "depth"]).itertuples():
            key = (str(r.layer), int(r.depth)) if r.depth == r.depth else None
            if key is not None and key not in grid_lrs:
                grid_lrs[key] = float(r.lr)
                if n > 0:
                    from_later[key] = f"vs {reference}"
    table = tuned_table(tuned, suite, grid_lrs if read else None, from_later)
    return ["## tuned (equal Optuna budget per layer and depth, chosen on val, re-run on seeds the search "
            "did not train on)", "", markdown_table(table), "",
            *([f"Moved from the grid's recipe: each value against the recipe's; {_grid_lr_note(read, problems)}.", ""]
              if suite is not None else [])]


def _grid_lr_note(read: list[str], problems: list[str]) -> str:
    """What a tuned row's lr was measured against: the reference folders read (`read`), and why any could not be."""
    if not read:
        return "the lr against the recipe's `train.lr`" + (f": {'; '.join(problems)}" if problems else
                                                           " (no reference grid folder to read a selected lr from)")
    if len(read) == 1:
        note = (f"the lr against the lr {read[0]} selected for the row (its selection seeds, val), or, for a row "
                "that folder lacks, against `train.lr`, as its cell says")
    else:
        note = (f"the lr against the lr the first of {', '.join(read)} that has the row selected for it (its selection "
                "seeds, val; a row read from a later one names it), or, for a row none has, against `train.lr`, as "
                "its cell says")
    return note + (f" ({'; '.join(problems)})" if problems else "")


def transfer_section(cells: pd.DataFrame, reference: Path, out_dir: Path) -> list[str]:
    """Does `reference`'s layer ranking hold here? Writes transfer.csv and transfer_rankings.csv into `out_dir`."""
    title = f"## Ranking transfer from {reference.name or reference}"
    there, problem = _reference_cells(reference)
    if problem is None and cells.attrs.get("legacy"):
        problem = "this suite's cells predate the test split (no val_top1/test_top1)"
    if problem is not None:
        return [title, "", f"NOTE: no ranking transfer check: {problem}.", ""]
    result = ranking_transfer(cells, there)
    result.summary.assign(reference=str(reference)).to_csv(out_dir / OutputFolder.TRANSFER, index=False)
    result.rankings.to_csv(out_dir / OutputFolder.TRANSFER_RANKINGS, index=False)
    lines = [title, "", f"Reference: `{reference}`. {TRANSFER_DEFINITION}.", ""]
    if not result.summary.empty:
        lines += [markdown_table(transfer_table(result.summary)), ""]
    lines += [f"- NOTE: {note}" for note in result.notes] + ([""] if result.notes else [])
    for depth, group in result.rankings.groupby("depth", sort=True):
        lines += [f"### depth {depth}: both rankings (rank 1 = best)", "",
                  markdown_table(rankings_table(group, reference.name or str(reference))), ""]
    return lines


def _reference_cells(reference: Path) -> tuple[pd.DataFrame, str | None]:
    """The reference's cells with scores, or why there are none (a note for the leaderboard, never a crash)."""
    csv = OutputFolder(reference).results
    if not reference.is_dir():
        return pd.DataFrame(), f"reference folder `{reference}` not found (resolved from {Path.cwd()})"
    if not csv.is_file():
        return pd.DataFrame(), f"`{csv}` not found (has the reference suite run and written its leaderboard?)"
    there = pd.read_csv(csv)
    missing = [c for c in ("depth", "layer", "lr", "seed", "status", "val_top1", "test_top1") if c not in there]
    if missing:
        return there, (f"`{csv}` lacks {', '.join(missing)} (written before the test split: regenerate its "
                       "leaderboard, or re-run the suite if its ledger has no test scores either)")
    if there["test_top1"].isna().all() and not (there["status"] == "diverged").all():
        return there, f"`{csv}` has no test scores (val_top1/test_top1 are empty)"
    return add_scores(there), None


def tuning_budget_section(ledger: Ledger, names: StudyNames) -> list[str]:
    """Trials per tuning study by outcome: the evidence that every layer got the same budget."""
    nan = float("nan")
    rows = []
    for name in sorted(n for n in ledger.study_names() if names.tune_point(n) is not None):
        trials = ledger.trials(ledger.study(name))
        spent = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        best = max((t.value for t in spent if t.value is not None), default=nan)
        rows.append({"study": names.tune_point(name), "trials": len(spent),
                     "pruned": sum(t.state == TrialState.PRUNED for t in spent),
                     "diverged": sum(t.user_attrs.get("result", {}).get("status") == "diverged" for t in spent),
                     # a FAIL is given back (a stop, a lost worker) or raised, and each is queued again: not spent
                     "stopped or lost (re-run)": sum(t.state == TrialState.FAIL and "error" not in t.user_attrs
                                                     for t in trials),
                     "raised (re-run)": sum(t.state == TrialState.FAIL and "error" in t.user_attrs for t in trials),
                     "best val top-1 (%, final epoch)": f"{best:.2f}"})
    if not rows:
        return []
    return ["## tuning budget (trials per study)", "", markdown_table(pd.DataFrame(rows)), ""]


def importance_section(ledger: Ledger, names: StudyNames) -> list[str]:
    """Per search, how much each searched value mattered to reaching a high final val: Optuna's own PED-ANOVA
    importances (`optuna.importance.get_param_importances`), computed as optuna-dashboard 0.21 computes the ones it
    shows (the value negated, since the studies maximize, and the evaluator's defaults), so the table and the
    dashboard read alike; deterministic, so a regenerated leaderboard reads the same. A search of one value, or with
    fewer than two finished trials, has none."""
    rows = []
    for name in sorted(n for n in ledger.study_names() if names.tune_point(n) is not None):
        study = ledger.study(name)
        complete = ledger.trials(study, (TrialState.COMPLETE,))
        searched = {k for t in complete for k in t.params}
        if len(complete) < 2 or len(searched) < 2 or not (importances := search_importances(study)):
            continue
        rows.append({"study": names.tune_point(name),
                     **{k: f"{v:.2f}" for k, v in sorted(importances.items())}})
    if not rows:
        return []
    return ["## what mattered in each search (Optuna's PED-ANOVA importance of each searched value for reaching the "
            "best final val top-1, as optuna-dashboard shows it; each row sums to 1)", "",
            markdown_table(pd.DataFrame(rows).fillna("—")), ""]


def search_importances(study: optuna.Study) -> dict[str, float]:
    """Optuna's PED-ANOVA importance of each searched value, as optuna-dashboard computes it; {} when the trials
    leave no variance to apportion."""
    import warnings

    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    with warnings.catch_warnings():  # Optuna warns whenever a target is passed; this one is the dashboard's
        warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator computes the importances")
        try:
            return get_param_importances(study, target=lambda t: -t.value, evaluator=PedAnovaImportanceEvaluator())
        except (RuntimeError, ValueError):
            return {}


def _with_recipe_columns(cells: pd.DataFrame, suite: Suite | None) -> pd.DataFrame:
    """Axes the matrix does not vary still get a column (and a report cell's seed where the matrix has no seed
    axis), from the base recipe: the tables group by them. Each cell's `steps_per_epoch` (as the loop counts them)
    dates histories written before they recorded their step."""
    if cells.empty:
        return cells
    base = suite.cell({}).config if suite else None
    fixed = {"depth": base.model.depth if base else 12, "layer": base.model.layer if base else "layernorm",
             "lr": base.train.lr if base else float("nan"), "seed": base.train.seed if base else 0}
    for axis, value in fixed.items():
        cells[axis] = cells[axis].fillna(value) if axis in cells else value
    if suite is not None:
        cells["steps_per_epoch"] = [_steps_per_epoch(suite, row) for row in cells.to_dict("records")]
    return cells


def _steps_per_epoch(suite: Suite, row: dict[str, Any]) -> int:
    train = suite.cell({k: row[k] for k in suite.matrix if k in row}).config.train
    batches = int(row.get("train_size") or 0) // train.batch_size
    return max(1, batches // train.grad_accum_steps)


def _single_suite_name(ledger: Ledger) -> str:
    """The one suite in a ledger whose folder has no suite.yaml; else a NormbenchError naming the fix."""
    names = suites_in(ledger.study_names())
    if not names:
        raise NormbenchError(f"{ledger.url}: no suite has run cells in this ledger; run the suite first, or point at "
                             "its output folder (and its --storage).")
    if len(names) > 1:
        raise NormbenchError(f"{ledger.url}: holds the cells of {len(names)} suites ({', '.join(names)}) and the "
                             f"output folder has no {OutputFolder.SUITE} to say which to report; copy the suite's "
                             f"file there as {OutputFolder.SUITE} and run `normbench leaderboard` again.")
    return names[0]
