"""The leaderboard's body for a run: per table (depth, budget) final accuracy and learning speed as two answers,
then all depths (when there are several), the paired comparisons with the baseline, the claims with their regime,
the rankings across budgets, lr sensitivity and failure, blow-ups that stayed finite, throughput and the figures;
first, any cells failed for good (they killed every worker that ran them). Formats an `Analysis`; computes nothing
new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from normbench.contracts.names import OutputFolder
from normbench.contracts.suite import BUDGET_FACTOR, BUDGET_SEEDS, Suite, claim_rival
from normbench.report.analysis import Analysis
from normbench.report.blowups import blowup_section
from normbench.report.budget import BUDGET_AXIS, budget_agreement, check_agreement
from normbench.report.claims import check_claims, round_seeds
from normbench.report.convergence import BUDGET_POINTS
from normbench.report.cost import cost_sections
from normbench.report.frames import FAILED
from normbench.report.header import budget_text, optimizer_text
from normbench.report.plots import write_accuracy_vs_step, write_lr_sensitivity, write_lr_vs_depth, write_plots
from normbench.report.stats import ALPHA, POWER, select_lr, selected_cells, selecting
from normbench.report.tables import (
    all_depths_table,
    baseline_table,
    budget_check_table,
    budget_table,
    claims_table,
    layer_table,
    lr_depth_table,
    markdown_table,
    speed_table,
    throughput_table,
)


def title(where: dict[str, Any]) -> str:
    return ", ".join(f"{v} epochs" if k == BUDGET_AXIS else f"{k} {v}" for k, v in where.items())


def _rows_of(frame: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    for k, v in where.items():
        frame = frame[frame[k] == v]
    return frame


GRID_ONLY = ["edge", "lr window", "lr sensitivity (points)"]  # read a grid's lrs; a tune's trials vary more than lr


def table_sections(analysis: Analysis, *, tuned: bool = False) -> list[str]:
    """Per table: final accuracy (with convergence and robustness columns), then learning speed. `tuned`: the lr is
    a search's winner among trials that differ in more than the lr, so the columns that read a grid's lrs go."""
    a = analysis
    params = a.cells.groupby(a.keys)["params"].first().to_dict() if "params" in a.cells else {}
    lines = []
    for where in a.selected[a.table_keys].drop_duplicates().sort_values(a.table_keys).to_dict("records"):
        rows = _rows_of(a.selected, where)
        separated = _rows_of(a.separation, where)["separated"] if not a.separation.empty else pd.Series()
        by_row = {tuple(r[k] for k in a.row_keys): params.get(tuple(r[k] for k in a.keys))
                  for r in rows.to_dict("records")}
        by_row = {k: v for k, v in by_row.items() if v is not None}
        table = layer_table(rows, a.row_keys, by_row or None, bool(separated.iloc[0]) if len(separated) else None)
        lines += [f"## {title(where)}: final accuracy ({budget_text(a, where)})", "",
                  *([f"Each lr is its search's winner (the tuned section gives the whole configuration); "
                     f"{', '.join(GRID_ONLY)} describe a grid's lrs and are left out.", ""] if tuned else []),
                  markdown_table(table.drop(columns=GRID_ONLY) if tuned else table), ""]
        speed = _rows_of(a.speed, where)
        if not speed.empty:
            lines += [f"## {title(where)}: learning speed (median optimizer steps to reach each val top-1 at the "
                      "selected lr, over the scoring seeds; how many reached it)", "",
                      markdown_table(speed_table(speed, a.row_keys, a.targets)), ""]
    return lines


def claim_regimes(analysis: Analysis, claims: pd.DataFrame, optimizer: str | None = None) -> list[str]:
    """Per claim row: its optimizer, its steps and which of its two rows had not converged."""
    texts = []
    for _, claim in claims.iterrows():
        where = {k: claim[k] for k in analysis.table_keys}
        rows = _rows_of(analysis.selected, where)
        rows = rows[rows["layer"].isin([claim["layer"], claim_rival(claim)[1]])]
        open_rows = rows[~rows["converged"].eq(True)]["layer"].tolist()
        state = "both rows converged" if not open_rows else f"unconverged: {', '.join(open_rows)}"
        texts.append(f"{optimizer + ', ' if optimizer else ''}{budget_text(analysis, where)}; {state}")
    return texts


def comparison_sections(analysis: Analysis, suite: Suite | None, *, tuned: bool = False) -> list[str]:
    a = analysis
    cells, selected, keys = a.cells, a.selected, a.keys
    lines = []
    if selected["depth"].nunique() > 1:  # with one depth it would repeat the final-accuracy table
        lines += ["## all depths (test top-1 % [95% CI] at each depth's val-selected lr; e = selected lr at the "
                  "grid's edge; sorted by the mean over depths)", "",
                  markdown_table(all_depths_table(selected, [*a.row_keys, *a.table_keys[1:]])), ""]
    if selected["depth"].nunique() > 1 and a.table_keys == ["depth"]:
        tried = selecting(cells).groupby([*a.row_keys, "depth"])["lr"].agg(["min", "max"])
        lines += ["## does the best lr move with depth? (each row's val-selected lr, e = at the edge of the lrs tried; "
                  "in brackets the lrs its selection seeds tried; figure lr_vs_depth)", "",
                  markdown_table(lr_depth_table(selected, tried, a.row_keys)), ""]
    baseline = suite.baseline if suite else ("layernorm" if "layernorm" in set(cells["layer"]) else None)
    if baseline is not None:
        table = baseline_table(cells, selected, keys, baseline)
        if not table.empty:
            lines += [f"## paired comparison with {baseline} (test top-1, matched scoring seeds, each layer at its "
                      f"own val-selected lr; paired t test, Holm-adjusted over this table: better/worse only where "
                      f"the adjusted p < {ALPHA:g})", "", markdown_table(table), ""]
    if suite is not None and suite.claims:
        claims = check_claims(cells, selected, keys, suite.claims, suite.sequential, round_seeds(suite, tuned))
        lines += [claims_heading(suite, tuned), "",
                  markdown_table(claims_table(claims, claim_regimes(a, claims, optimizer_text(suite)))), ""]
    lines += convergence_check_section(a)
    if BUDGET_AXIS in a.table_keys:
        group_keys = [k for k in a.table_keys if k != BUDGET_AXIS]
        agreement = budget_agreement(selected, group_keys)
        if not agreement.empty:
            lines += ["## does the ranking hold across budgets? (Spearman's rho of the layer scores against the "
                      f"largest budget's; one-sided exact permutation p; holds: rho > 0 and p < {ALPHA:g})", "",
                      markdown_table(budget_table(agreement, group_keys)), ""]
    return lines


def claims_heading(suite: Suite, tuned: bool = False) -> str:
    """The claims table's rule in one paragraph (docs/protocol.md, "Claims that can end")."""
    rounds = suite.sequential
    margin = f"{rounds.margin:g} points" if rounds.margin else "none"
    looked = (f"a claim on report seeds is looked at after each round of {len(suite.report_seeds)} (up to "
              f"{rounds.max_seeds} seeds), its p the repeated p-value under {rounds.spending.replace('_', '-')} "
              "alpha spending (each look against its level); " if round_seeds(suite, tuned) else
              "one look at the tuned re-runs' seeds (`tune` runs no claim rounds); " if tuned else "")
    return (f"## claims (paired t test of the difference against `by`: {looked}Holm-adjusted over the claims, "
            f"supported where p < {ALPHA:g} and the difference lies above `by`, contradicted where below; else no "
            "effect found where two one-sided tests put it within ± the margin of zero (the source's `claimed` effect, "
            f"else the suite's: {margin}), Holm-adjusted alike; else open while another round of report seeds could "
            f"decide it (its cap could detect, at {POWER:.0%} power, the larger of the margin and the difference "
            "seen), else underpowered; each read in the regime it states)")


def convergence_check_section(analysis: Analysis) -> list[str]:
    """The 2x budget check per row, and per table whether the ranking at 1x is the ranking at 2x."""
    if analysis.budget.empty:
        return []
    a = analysis
    agreement = check_agreement(a.budget, a.row_keys, a.table_keys)
    return [f"## convergence check: each row's selected lr at {BUDGET_FACTOR}x the epochs (val top-1 %, seed mean over "
            f"the same {BUDGET_SEEDS} report seeds at both budgets; converged: the change is under {BUDGET_POINTS:g} "
            "point; the 2x cells never choose nor score)", "",
            markdown_table(budget_check_table(a.budget, a.row_keys, a.table_keys)), "",
            f"Does the ranking at 1x hold at {BUDGET_FACTOR}x? (Spearman's rho of the rows' val at 1x against 2x, "
            f"one-sided exact permutation p; holds: rho > 0 and p < {ALPHA:g})", "",
            markdown_table(agreement), ""]


def failed_section(failed: list[dict[str, Any]]) -> list[str]:
    """'failed for good (N attempts)': per cell (frames.failed_cells) one row per attempt, with the worker's host
    and pid and the verdict that took it for lost; [] when no cell failed for good."""
    if not failed:
        return []
    counts = " or ".join(str(n) for n in sorted({len(cell["attempts"]) for cell in failed}))
    rows = [{"cell": cell["cell_id"] + (f" (retry {cell['retry_round']})" if cell["retry_round"] else ""),
             "attempt": f"{i} (trial {attempt.get('trial')})",
             "worker": f"{attempt.get('host') or '?'} pid {attempt.get('pid') or '?'}",
             "started": attempt.get("started") or "?", "verdict": attempt.get("verdict", "?")}
            for cell in failed for i, attempt in enumerate(cell["attempts"], 1)]
    return [f"## failed for good ({counts} attempts)", "",
            "Each attempt at these cells killed the worker running it (OOM kill, segfault, watchdog), so they were "
            "not queued again and are missing from every table below. Fix the cause, then `normbench run SUITE "
            "--retry-failed` gives them another round.", "", markdown_table(pd.DataFrame(rows)), ""]


def figure_references(analysis: Analysis, out_dir: Path) -> dict[str, float]:
    """The accuracy figures' reference lines: chance (100 / classes) and the data's ceiling (the best simple model
    of ceiling.csv, test top-1), those known."""
    references = {}
    if analysis.regime.num_classes:
        references["chance"] = 100.0 / analysis.regime.num_classes
    path = OutputFolder(out_dir).ceiling
    if path.is_file():
        ceiling = pd.read_csv(path)
        if len(ceiling) and "test_top1" in ceiling:
            best = ceiling.loc[ceiling["test_top1"].idxmax()]
            references[f"ceiling ({best['model']})"] = float(best["test_top1"])
    return references


def run_sections(analysis: Analysis, suite: Suite | None, out_dir: Path, *, tuned: bool = False) -> list[str]:
    """Every section of a run's leaderboard, and its figures; `tuned`: `normbench tune` wrote the folder."""
    a = analysis
    lines = [*failed_section(a.cells.attrs.get(FAILED, [])), *table_sections(a, tuned=tuned),
             *comparison_sections(a, suite, tuned=tuned),
             *blowup_section(a)]
    lines += ["## throughput (median training images/s over each row's cells)", "",
              "Wall clock of cells that may have shared the machine with other work: a rough guide, not a speed "
              "benchmark (`normbench bench` measures speed).", "",
              markdown_table(throughput_table(a.cells, [*a.row_keys, *a.table_keys[1:]])), "",
              *cost_sections(out_dir, suite.name if suite else None)]
    dataset = suite.dataset.name if suite else "?"
    largest = a.cells
    if BUDGET_AXIS in a.table_keys:  # the depth and lr figures show the largest budget
        largest = largest[largest[BUDGET_AXIS] == largest[BUDGET_AXIS].max()]
    epochs = ", ".join(str(int(e)) for e in sorted(largest["epochs_run"].unique())) if suite is None \
        else str(suite.cell({}).config.train.epochs) if BUDGET_AXIS not in a.table_keys \
        else str(int(largest[BUDGET_AXIS].max()))
    order = suite.layers() if suite else None  # one order (and colour) per layer in every figure
    references = figure_references(a, out_dir)
    plots = write_plots(largest, select_lr(largest, ["layer", "depth"]), out_dir, dataset=dataset, epochs=epochs,
                        order=order, references=references, baseline=suite.baseline if suite else "layernorm")
    for extra in (write_accuracy_vs_step(a.history, selected_cells(a.cells, a.selected, a.keys), out_dir,
                                         dataset=dataset, order=order, references=references),
                  write_lr_sensitivity(a.selected, out_dir, dataset=dataset, table_keys=a.table_keys, order=order),
                  write_lr_vs_depth(a.selected, a.cells, out_dir, dataset=dataset, order=order)
                  if a.table_keys == ["depth"] else None):
        if extra is not None:
            plots.append(extra)
    return [*lines, *(f"![{p.stem}]({p.name})" for p in plots), ""]
