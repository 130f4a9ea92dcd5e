"""The leaderboard's header: the suite and recipe, the splits and seeds, the training regime in words, the data's
ceiling, the devices that trained, the ledger's newest record and how every number below is defined. A reader learns
here in which regime a number holds.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import asdict
from typing import Any

import pandas as pd

from normbench.contracts.matrix_scope import WHY
from normbench.contracts.names import ADOPTED_ATTR
from normbench.contracts.recipe import RUN_KEYS
from normbench.contracts.selection import CHANCE_SE, REPORTS, ROLE, SELECTS, TIE_RULE
from normbench.contracts.suite import BUDGET_FACTOR, BUDGET_SEEDS, Suite
from normbench.data.config import DATASET_ONLY_KEYS
from normbench.report.analysis import Analysis
from normbench.report.convergence import BUDGET_POINTS, LOSS_TOLERANCE, RISE_POINTS, RISE_SHARE
from normbench.report.frames import LEFT_OUT
from normbench.report.stats import ALPHA
from normbench.report.style import lr_text

SCORE_DEFINITION = (
    "score = test top-1 (%) at the final epoch, at the lr whose seed-mean val top-1 (final epoch) over the "
    "selection seeds is highest (" + TIE_RULE + "); then that lr is trained on the report seeds, which selection "
    "never saw, and they give the score (a row without report cells is scored on its selection seeds, marked "
    "'select' in n); val chooses, test only reports; a diverged cell scores 0; 95% CI = Student t interval over "
    "the scoring seeds, clipped to [0, 100]; non-failing = the mean over the seeds that did not diverge; "
    "'edge' = the selected lr is the smallest or largest tried; 'no signal' = the best lr's cells sit at chance "
    f"(within {CHANCE_SE:g} binomial standard errors) or the lr means are within the seeds' spread; 'lr window' = "
    "the span of lrs whose selection-seed mean lies within the selected lr's selection-seed CI; lr sensitivity "
    "(Wortsman et al. 2023) = the mean over the lrs every row of the table tried of (the row's best seed-mean "
    "score) minus (its seed-mean score there), a diverged cell counted at chance; failed = diverged cells over all "
    "the row's lrs; 1 ★ = the top row is separated from the second (paired t test over matched seeds, "
    f"Holm-adjusted over the tables, p < {ALPHA:g}), else 1 (tied)")


# None is a per-dataset or per-paper default, left out of the recipe, except where it is a choice of its own
NONE_MEANS = {"clip_grad": "off"}


def _value_text(key: str, value: Any) -> str:
    if value is None:
        return NONE_MEANS[key]
    return lr_text(value) if key.endswith("lr") and isinstance(value, float) else str(value)


def _axis_text(key: str, values: list[Any]) -> str:
    return f"[{', '.join(_value_text(key, v) for v in values)}]" if key.endswith("lr") else str(values)


# how a regime line names the optimizer (train/muon.py splits the Muon family's parameters between Muon and AdamW)
OPTIMIZER_NAMES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD", "lamb": "LAMB", "lion": "Lion",
                   "muon": "Muon on the hidden matrices, AdamW on the rest",
                   "adamuon": "AdaMuon on the hidden matrices, AdamW on the rest"}


def optimizer_text(suite: Suite | None) -> str | None:
    """The optimizer every cell trained with, as a regime states it; None without a suite, and "the optimizer of
    each row" when the matrix varies it."""
    if suite is None:
        return None
    if "optimizer" in suite.matrix:
        return "the optimizer of each row (a matrix axis)"
    name = str(suite.cell({}).config.train.optimizer)
    return OPTIMIZER_NAMES.get(name.lower(), name)


def recipe_lines(suite: Suite) -> list[str]:
    """Every value the cells trained with (the suite's base recipe resolved against the defaults); matrix axes are
    listed as axes, and a value left to its default (None) is left out."""
    config = suite.cell({}).config
    axes = set(suite.matrix)
    data = asdict(config.data)
    for name, keys in DATASET_ONLY_KEYS.items():
        if config.data.name != name:
            data = {k: v for k, v in data.items() if k not in keys}

    def text(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={_value_text(k, v)}" for k, v in values.items()
                         if k not in axes and (v is not None or k in NONE_MEANS))

    own = "".join(f"; {layer} starts from lr {_axis_text('lr', grid)} instead" for layer, grid in
                  suite.lr_by_layer.items())
    return [f"- matrix: {', '.join(f'{k} {_axis_text(k, v)}' for k, v in suite.matrix.items())}{own}"
            + (f"; {bracketing_text(suite)}" if suite.bracket else "")
            + (f"; report seeds {suite.report_seeds}" if suite.report_seeds else ""),
            # block_kwargs only when set (a family's expansion rate): the recipes written before it read as they did
            f"- model: {text({k: v for k, v in asdict(config.model).items() if k != 'block_kwargs' or v})}",
            f"- train: {text({k: v for k, v in asdict(config.train).items() if k not in RUN_KEYS})}",
            f"- dataset: {text(data)}"]


def seeds_line(cells: pd.DataFrame) -> str:
    def seeds(role: str) -> list[int]:
        chosen = cells[cells[ROLE] == role] if ROLE in cells else cells
        return sorted(int(s) for s in chosen["seed"].dropna().unique())

    report = seeds(REPORTS)
    added = int((cells["bracket_round"] > 0).sum()) if "bracket_round" in cells else 0
    return (f"- seeds: selection {seeds(SELECTS)}; report "
            + (f"{report} (fresh: they never chose an lr)" if report else
               "none (every score comes from the seeds that chose its lr: optimistic)" if cells["lr"].nunique() > 1
               else "none (one lr: nothing was chosen, so the selection seeds report without that bias)")
            + f"; lrs tried: {', '.join(lr_text(lr) for lr in sorted(cells['lr'].dropna().unique()))}"
            + (f" ({added} cells added by bracketing)" if added else ""))


def regime_word(converged: int, rows: int, unconfirmed: int = 0) -> str:
    """The regime `converged` of `rows` rows make; `unconfirmed` of the converged only the final-loss rule calls so
    (no 2x check), which the word then says: that rule's yes is weak (docs/protocol.md)."""
    if rows and 2 * converged >= rows:
        word = ("converged: these are final-accuracy numbers" if converged == rows
                else "mostly converged: read unconverged rows as lower bounds")
        if unconfirmed:
            word = word.replace(":", f" ({unconfirmed} of them by the final-loss rule alone, unconfirmed):", 1)
        return word
    return "early training: most rows have not converged, so these numbers measure how fast a layer gets going"


def budget_text(analysis: Analysis, where: dict[str, Any] | None = None) -> str:
    """'10 epochs = 160 optimizer steps (17,280 images) per cell' over the cells that trained every epoch (of the
    table `where`, when given); several budgets are listed."""
    cells = analysis.cells
    if where:
        for k, v in where.items():
            cells = cells[cells[k] == v]
    done = analysis.history[analysis.history["cell_id"].isin(set(cells[cells["status"] == "ok"]["cell_id"]))]
    if done.empty:
        return "no cell trained to its end"
    last = done.sort_values("epoch").groupby("cell_id").tail(1)
    parts = []
    for (epochs, step, images), _ in last.groupby([last["epoch"] + 1, "step", "images"], dropna=False):
        images_text = f" ({int(images):,} images)" if images == images else ""
        parts.append(f"{int(epochs)} epochs = {int(step)} optimizer steps{images_text}")
    return "; ".join(parts) + " per cell"


def converged_counts(selected: pd.DataFrame) -> tuple[int, int]:
    """(rows converged, those of them only the final-loss rule calls so: no 2x check ran for them)."""
    converged = selected["converged"].eq(True)  # NaN: unknown (no check, or its cells on another device)
    by_rule = selected["change"].isna() if "change" in selected else pd.Series(True, index=selected.index)
    return int(converged.sum()), int((converged & by_rule).sum())


def regime_line(analysis: Analysis, optimizer: str | None = None) -> str:
    selected = analysis.selected
    converged, unconfirmed = converged_counts(selected)
    rows = len(selected)
    regime = analysis.regime
    if regime.threshold is not None:
        rule = (f"median final train loss at most {regime.threshold:.3f}, i.e. within {LOSS_TOLERANCE:g} of the way "
                f"from chance's ln {regime.num_classes} = {math.log(regime.num_classes):.3f} down to the "
                f"label-smoothing floor {regime.floor:.3f}, and")
    elif regime.soft_targets:
        rule = "mixup/cutmix train on soft targets without a constant loss floor: only"
    else:
        rule = "no loss floor known (number of classes not recorded): only"
    checked = int((analysis.budget["seeds"] > 0).sum()) if len(analysis.budget) else 0
    apart = len(analysis.budget) - checked  # 2x cells on another device than the 1x cells: compared with nothing
    if checked:  # protocol v2's check, which can fail: doubling the budget must not move the row
        rule_text = (f"{checked} of them checked by training the selected lr on {BUDGET_SEEDS} report seeds at "
                     f"{BUDGET_FACTOR}x the epochs (schedule stretched): converged when that changes the seed-mean "
                     f"val top-1 by less than {BUDGET_POINTS:g} point, {BUDGET_POINTS:g} point being 3.6 of 360 "
                     "digits val images, about half a converged row's seed-to-seed spread"
                     + (f"; {apart} not comparable (their 2x and 1x cells trained on different devices)"
                        if apart else "")
                     + ("" if checked + apart == rows else f"; the other {rows - checked - apart}: {rule} the "
                        f"seed-mean val curve gaining at most {RISE_POINTS:g} point over the last {RISE_SHARE:.0%} "
                        "of epochs"))
    else:
        rule_text = (f"{rule} the seed-mean val curve gaining at most {RISE_POINTS:g} point over the last "
                     f"{RISE_SHARE:.0%} of epochs; no 2x budget check ran, and under a cosine schedule this rule "
                     "rarely fails")
    trained = f"{optimizer}, " if optimizer else ""
    return (f"- regime: {trained}{budget_text(analysis)}; {converged} of {rows} rows converged ({rule_text}): "
            f"{regime_word(converged, rows, unconfirmed)}")


def ceiling_text(ceiling: str | None) -> list[str]:
    return [f"- {ceiling}"] if ceiling else []


def ledger_line(newest: datetime.datetime | None) -> str:
    """`- ledger: newest trial record 2026-11-29 13:13 UTC; ...`: what dates the numbers. Only what the ledger holds:
    the writer's machine, versions and clock would make a published folder differ each time it is regenerated
    (the trained-on line names the devices and torch versions that trained)."""
    if newest is None:
        return "- ledger: no trial recorded yet"
    return (f"- ledger: newest trial record {newest:%Y-%m-%d %H:%M} UTC (every number here is computed from it and "
            "the folder's inputs: regenerated anywhere, this file is the same byte for byte)")


def header(suite: Suite | None, cells: pd.DataFrame, analysis: Analysis | None, ceiling: str | None,
           newest: datetime.datetime | None = None) -> list[str]:
    """The header's lines; `newest`: the ledger's newest trial record, in UTC (leaderboard.py `newest_record`)."""
    lines = [f"# normbench leaderboard: {suite.name if suite else '?'}", ""]
    if suite is not None:
        lines += [f"- suite: `{suite.path}`" + (f" — {suite.description}" if suite.description else "")]
        lines += recipe_lines(suite)
    if not cells.empty:
        if all(k in cells for k in ("train_size", "val_size", "test_size")):
            sizes = cells[["train_size", "val_size", "test_size"]].dropna().drop_duplicates()
            split = "; ".join("/".join(str(int(v)) for v in row) for row in sizes.itertuples(index=False))
            lines.append(f"- splits (train/val/test images): {split}")
        lines.append(seeds_line(cells))
    if analysis is not None:
        lines.append(regime_line(analysis, optimizer_text(suite)))
    lines += ceiling_text(ceiling)
    lines += [*trained_on(cells), *adopted_lines(cells), ledger_line(newest),
              f"- {len(cells)} cells; {SCORE_DEFINITION}"]
    if left_out := cells.attrs.get(LEFT_OUT):
        lines.append(f"- {left_out} finished cell{'s' if left_out != 1 else ''} of the ledger left out: {WHY} "
                     "(put the values back in the matrix to count them again)")
    if cells.attrs.get("legacy"):
        lines.append("- NOTE: this ledger predates the test split: every number below is the best-epoch VAL top-1, "
                     "chosen on the same split (optimistic); re-run the suite for test scores")
    return [*lines, ""]


def trained_on(cells: pd.DataFrame) -> list[str]:
    """`- trained on: CPU (x86_64, 2 cores) (36 cells, torch 2.14.1, 1-2 threads)`: where the cells ran, from their
    results (the leaderboard names no machine of its own: ledger_line). None for cells recorded before results named a
    device; threads only where the cells recorded them (a CPU cell's numbers depend on them)."""
    if cells.empty or "device" not in cells:
        return []
    known = cells[cells["device"].fillna("").astype(str) != ""]
    if known.empty:
        return []
    parts = []
    for (device, torch), group in known.fillna({"torch_version": "?"}).groupby(["device", "torch_version"], sort=True):
        n = len(group)
        parts.append(f"{device} ({n} cell{'s' if n != 1 else ''}, torch {torch}{_threads(group)})")
    unknown = len(cells) - len(known)
    return [f"- trained on: {', '.join(parts)}" + (f"; {unknown} recorded none" if unknown else "")]


def adopted_lines(cells: pd.DataFrame) -> list[str]:
    """`- adopted: 60 cells (rows layernorm, ngpt) copied from results/x, trained there under this recipe`: the cells
    another folder trained (sweep/adopt.py); none for a folder that trained all its own."""
    if cells.empty or ADOPTED_ATTR not in cells:
        return []
    adopted = cells[cells[ADOPTED_ATTR].notna()]
    parts = []
    for folder, group in adopted.groupby(ADOPTED_ATTR, sort=True):
        rows = ", ".join(sorted(group["layer"].astype(str).unique())) if "layer" in group else "?"
        parts.append(f"{len(group)} cell{'s' if len(group) != 1 else ''} (rows {rows}) from `{folder}`")
    return [f"- adopted: {'; '.join(parts)}, copied from its ledger: trained there under this recipe "
            "(sweep/adopt.py), each with its device"] if parts else []


def _threads(group: pd.DataFrame) -> str:
    """`, 1-2 threads` over the cells' recorded torch threads ("2", "2/1"); empty when none recorded them."""
    if "torch_threads" not in group:
        return ""
    counts = {int(t) for value in group["torch_threads"].dropna().astype(str) for t in value.split("/") if t}
    if not counts:
        return ""
    span = str(min(counts)) if len(counts) == 1 else f"{min(counts)}-{max(counts)}"
    return f", {span} thread{'s' if max(counts) > 1 else ''}"


def bracketing_text(suite: Suite) -> str:
    """The bracketing the suite asked for, in the words of its header line (protocol v3)."""
    cap = f", at most {suite.bracket_max_steps} steps beyond each end" if suite.bracket_max_steps else ""
    return f"bracketing v3 on (lr bounds [{suite.lr_bounds[0]:g}, {suite.lr_bounds[1]:g}]{cap})"
