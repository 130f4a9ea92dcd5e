"""Ledger -> pandas -> results.csv, leaderboard.md and plots. Regenerable any time with `normbench leaderboard`.

The protocol (README "Protocol"): a cell is scored by its test top-1 at the final epoch and judged for selection
by its val top-1 at the final epoch; a diverged cell gets 0 for both. Per (layer, depth) the lr with the highest
seed-mean val is selected and the test score there is reported with a 95% Student t interval over seeds. The
statistics are normbench/report/stats.py; this module reads the ledger and writes the files.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from optuna.trial import TrialState

from normbench.data.config import DATASET_ONLY_KEYS
from normbench.report.machine import machine_line
from normbench.report.plots import write_plots
from normbench.report.stats import check_claims, select_lr
from normbench.report.tables import (
    all_depths_table,
    baseline_table,
    claims_table,
    layer_table,
    markdown_table,
    rankings_table,
    throughput_table,
    transfer_table,
    tuned_table,
)
from normbench.report.telemetry_figures import telemetry_section
from normbench.report.transfer import RESAMPLES, ranking_transfer
from normbench.spec.names import OutputFolder, StudyNames, suites_in
from normbench.spec.selection import add_scores
from normbench.spec.suite import Suite
from normbench.store.ledger import Ledger
from normbench.store.migrations import trial_axes

SCORE_DEFINITION = ("score = test top-1 (%) at the final epoch, at the lr whose seed-mean val top-1 (final epoch) "
                    "is highest; val chooses, test only reports; a diverged cell scores 0; 95% CI = Student t "
                    "interval over seeds (none with one seed); 'edge' = the selected lr is the smallest or largest "
                    "tried; 'lr window' = the span of lrs whose mean lies within the selected lr's CI")
SPLIT_KEYS = ("train_size", "val_size", "test_size")


def cells_frame(ledger: Ledger, names: StudyNames, *, tuned: bool = False) -> pd.DataFrame:
    """One row per finished cell of the suite's run and bracketing studies (or, with `tuned`, of its tuned re-runs):
    axes, metrics, status, and `bracket_round` (0 for the matrix)."""
    present = set(ledger.study_names())
    if tuned:
        studies = [(names.tuned, 0)]
    else:
        studies = [(names.run, 0), *((n, names.bracket_round(n) or 0) for n in names.bracket_rounds(present))]
    rows = []
    for name, bracket_round in studies:
        if name not in present:
            continue
        for t in ledger.study(name).get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            axes = trial_axes(t)
            result = t.user_attrs.get("result", {})
            rows.append({"cell_id": t.user_attrs.get("cell_id"), **axes, **result, "trial": t.number,
                         "bracket_round": bracket_round, "tuned_params": t.user_attrs.get("overrides")})
    frame = pd.DataFrame(rows)
    return frame if frame.empty else add_scores(frame)


def recipe_lines(suite: Suite) -> list[str]:
    """Every value the cells trained with (the suite's base recipe resolved against the defaults); matrix axes are
    listed as axes."""
    config = suite.cell({}).config
    axes = set(suite.matrix)
    data = asdict(config.data)
    for name, keys in DATASET_ONLY_KEYS.items():
        if config.data.name != name:
            data = {k: v for k, v in data.items() if k not in keys}

    def text(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items() if k not in axes)

    lines = [f"- matrix: {', '.join(f'{k} {v}' for k, v in suite.matrix.items())}"
             + (f"; bracketing on (at most {suite.bracket_max_steps} steps beyond each end)" if suite.bracket else ""),
             f"- model: {text(asdict(config.model))}",
             f"- train: {text(asdict(config.train))}",
             f"- dataset: {text(data)}"]
    return lines


def header(suite: Suite | None, cells: pd.DataFrame) -> list[str]:
    lines = [f"# normbench leaderboard: {suite.name if suite else '?'}", ""]
    if suite is not None:
        lines += [f"- suite: `{suite.path}`" + (f" — {suite.description}" if suite.description else "")]
        lines += recipe_lines(suite)
    if not cells.empty:
        if all(k in cells for k in SPLIT_KEYS):
            sizes = cells[list(SPLIT_KEYS)].dropna().drop_duplicates()
            split = "; ".join("/".join(str(int(v)) for v in row) for row in sizes.itertuples(index=False))
            lines.append(f"- splits (train/val/test images): {split}")
        lines.append(f"- seeds: {sorted(cells['seed'].unique().tolist())}; lrs tried: "
                     f"{', '.join(f'{lr:g}' for lr in sorted(cells['lr'].unique()))}"
                     + (f" ({int((cells['bracket_round'] > 0).sum())} cells added by bracketing)"
                        if "bracket_round" in cells and (cells["bracket_round"] > 0).any() else ""))
    lines += [f"- {machine_line()}", f"- {len(cells)} cells; {SCORE_DEFINITION}"]
    if cells.attrs.get("legacy"):
        lines.append("- NOTE: this ledger predates the test split: every number below is the best-epoch VAL top-1, "
                     "chosen on the same split (optimistic); re-run the suite for test scores")
    return [*lines, ""]


def write_leaderboard(out_dir: Path, *, suite: Suite | None, storage: str | None = None,
                      tracker: Any = None, reference: str | Path | None = None) -> Path:
    """Write results.csv, leaderboard.md and the plots into `out_dir`; log them to MLflow when a tracker is given.

    `reference` (default: the suite's `reference:`) is another suite's output folder: the leaderboard then says
    whether its layer ranking holds here, and transfer.csv is written.
    """
    folder = OutputFolder(out_dir)
    out_dir = folder.path
    ledger = Ledger(storage, out_dir)
    names = StudyNames(suite.name if suite else _single_suite_name(ledger))
    cells = _with_fixed_axes(cells_frame(ledger, names), suite)
    tuned = _with_fixed_axes(cells_frame(ledger, names, tuned=True), suite)
    if not cells.empty:
        cells.drop(columns=["history", "telemetry"], errors="ignore").to_csv(folder.results, index=False)
    lines = header(suite, cells)
    if cells.empty:
        lines.append("No finished cells yet.")
    else:
        lines += run_sections(cells, suite, out_dir)
        reference = reference if reference is not None else suite.reference if suite else None
        if reference is not None:
            lines += transfer_section(cells, Path(reference), out_dir)
    if not tuned.empty:
        lines += ["## tuned (equal Optuna budget per layer and depth, chosen on val, re-run on seeds the search "
                  "did not train on)", "", markdown_table(tuned_table(tuned)), ""]
    lines += budget_section(ledger, names)
    # further sections (e.g. telemetry figures) append to `lines` here, before it is written
    lines += telemetry_section(cells, out_dir)
    path = folder.leaderboard
    path.write_text("\n".join(lines))
    if tracker is not None:
        tracker.log_artifacts(out_dir)
    return path


def run_sections(cells: pd.DataFrame, suite: Suite | None, out_dir: Path) -> list[str]:
    """Per-depth tables, all depths, the paired comparison with the baseline, claims, throughput and plots."""
    extra = [c for c in (suite.matrix if suite else []) if c not in ("depth", "layer", "lr", "seed")]
    keys = ["layer", *extra, "depth"]
    selected = select_lr(cells, keys)
    params = cells.groupby(keys)["params"].first().to_dict() if "params" in cells else None
    lines = []
    for depth in sorted(cells["depth"].unique()):
        table = layer_table(selected[selected["depth"] == depth], ["layer", *extra],
                            {k[:-1]: v for k, v in (params or {}).items() if k[-1] == depth} or None)
        lines += [f"## depth {depth}", "", markdown_table(table), ""]
    lines += ["## all depths (test top-1 % [95% CI] at each depth's val-selected lr; e = selected lr at the grid's "
              "edge; sorted by the mean over depths)", "",
              markdown_table(all_depths_table(selected, ["layer", *extra])), ""]
    baseline = suite.baseline if suite else ("layernorm" if "layernorm" in set(cells["layer"]) else None)
    if baseline is not None:
        table = baseline_table(cells, selected, keys, baseline)
        if not table.empty:
            lines += [f"## paired comparison with {baseline} (test top-1, same seeds, each layer at its own "
                      "val-selected lr)", "", markdown_table(table), ""]
    if suite is not None and suite.claims:
        claims = check_claims(cells, selected, keys, suite.claims)
        lines += ["## claims (supported: the paired 95% CI lies above `by`; contradicted: below; else inconclusive)",
                  "", markdown_table(claims_table(claims)), ""]
    lines += ["## throughput (median training images/s over each row's cells)", "",
              "Wall clock of cells that may have shared the machine with other work: a rough guide, not a speed "
              "benchmark (`normbench bench` measures speed).", "", markdown_table(throughput_table(cells, keys[:-1])),
              ""]
    dataset = suite.dataset.name if suite else "?"
    epochs = ", ".join(str(int(e)) for e in sorted(cells["epochs_run"].unique())) if suite is None \
        else str(suite.cell({}).config.train.epochs)
    plots = write_plots(cells, select_lr(cells, ["layer", "depth"]), out_dir, dataset=dataset, epochs=epochs)
    return [*lines, *(f"![{p.stem}]({p.name})" for p in plots), ""]


TRANSFER_DEFINITION = (f"score = test top-1 (%) at each suite's own val-selected lr, mean over seeds (as above); "
                       "rho = Spearman's rank correlation over the layers both suites ran at a depth (ties get "
                       f"average ranks); 95% interval = percentile bootstrap, {RESAMPLES} resamples of the seeds with "
                       "replacement within each layer's selected lr, each suite independently, the selected lrs kept "
                       "fixed; 'all' = the mean of the per-depth rhos, its interval from the same resamples; holds: "
                       "the interval lies above 0, reversed: below 0, else not settled")


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


def budget_section(ledger: Ledger, names: StudyNames) -> list[str]:
    """Trials per tuning study by outcome: the evidence that every layer got the same budget."""
    nan = float("nan")
    rows = []
    for name in sorted(n for n in ledger.study_names() if names.tune_point(n) is not None):
        trials = ledger.study(name).get_trials(deepcopy=False)
        spent = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        best = max((t.value for t in spent if t.value is not None), default=nan)
        rows.append({"study": names.tune_point(name), "trials": len(spent),
                     "pruned": sum(t.state == TrialState.PRUNED for t in spent),
                     "diverged": sum(t.user_attrs.get("result", {}).get("status") == "diverged" for t in spent),
                     "lost workers (re-run)": sum(t.state == TrialState.FAIL for t in trials),
                     "best val top-1 (%, final epoch)": f"{best:.2f}"})
    if not rows:
        return []
    return ["## tuning budget (trials per study)", "", markdown_table(pd.DataFrame(rows)), ""]


def _with_fixed_axes(cells: pd.DataFrame, suite: Suite | None) -> pd.DataFrame:
    """Axes the matrix does not vary still get a column, from the base recipe (the tables group by them)."""
    if cells.empty:
        return cells
    base = suite.cell({}).config if suite else None
    fixed = {"depth": base.model.depth if base else 12, "layer": base.model.layer if base else "layernorm",
             "lr": base.train.lr if base else float("nan"), "seed": base.train.seed if base else 0}
    for axis, value in fixed.items():
        if axis not in cells:
            cells[axis] = value
    return cells


def _single_suite_name(ledger: Ledger) -> str:
    names = suites_in(ledger.study_names())
    if len(names) != 1:
        raise ValueError(f"expected one suite in {ledger.url}, found {names}")
    return names[0]
