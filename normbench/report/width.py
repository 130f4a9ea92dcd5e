"""Width as a regime: one grid at two model widths (same depth, epochs and protocol), row by row: does each row's rank
and its gap to the baseline hold across width (`normbench compare NARROW WIDE`)?

Ranks are taken over the rows both folders ran (a rank among 19 rows and one among 7 do not compare). Both folders
finished (report seeds scored every row): ranks and gaps are test top-1 over the report seeds and the verdict reads
each folder's paired test against the baseline (Holm within the folder, as its leaderboard): "ranking holds across
width" when both readings are the same decided one, "moves" when they are opposite, "worse at width 64 only" (or
better) when one width decided it and the other did not, else "cannot tell (within noise)". Either folder unfinished:
ranks and gaps are the selection seeds' val means at the selected lr (the seeds that chose it: optimistic, labelled
so) and every verdict is "cannot tell (unfinished)". Pure: formats `FolderRead`s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from normbench.report.folder import FolderRead, folder_name
from normbench.report.stats import REPORTS, reading, versus_baseline
from normbench.report.style import lr_text, window_text
from normbench.report.tables import BASELINE_VERDICTS

MOVES = "moves"
NOISE, UNFINISHED = "cannot tell (within noise)", "cannot tell (unfinished)"


def holds(factor: str) -> str:
    return f"ranking holds across {factor}"


HOLDS = holds("width")
TEST, VAL = "test top-1, report seeds", "selection val top-1 (unfinished: the seeds that chose the lr; optimistic)"


def width_of(read: FolderRead) -> int:
    return int(read.suite.cell({}).config.model.embed_dim)


def epochs_of(read: FolderRead) -> int:
    return int(read.suite.cell({}).config.train.epochs)


def optimizer_of(read: FolderRead) -> str:
    return str(read.suite.cell({}).config.train.optimizer)


def recipe_of(read: FolderRead) -> str:
    """"tuned" for a folder `normbench tune` wrote (each row's recipe searched), "grid" for `normbench run`'s."""
    return "tuned" if read.tuned else "grid"


def converged_word(flag: object) -> str:
    """A row's `converged` as a table writes it: yes, no, or ? (unknown)."""
    return "?" if flag is None or flag != flag else "yes" if bool(flag) else "no"


def finished(selected: pd.DataFrame) -> bool:
    """Every row scored by report seeds (select_lr's `seeds`; `seeds_x` once analysis merged the 2x check's own
    `seeds` beside it); else its scores are the selection seeds'."""
    column = "seeds" if "seeds" in selected else "seeds_x"
    return not selected.empty and bool((selected[column] == REPORTS).all())


@dataclass
class Side:
    """One folder as the width table reads it: its label, select_lr's rows, and versus_baseline's (may be empty)."""

    label: str
    selected: pd.DataFrame
    versus: pd.DataFrame
    tuned: bool = False  # a tune folder: its lrs are a search's draws, so no grid edge and no lr window


def side(read: FolderRead, baseline: str, label: str | None = None) -> Side:
    a = read.analysis
    return Side(label or f"width {width_of(read)}", a.selected, versus_baseline(a.cells, a.selected, a.keys,
                                                                                baseline), bool(read.tuned))


def window_cell(row: pd.Series, tuned: bool) -> str:
    """A row's lr window as the leaderboard writes it; "—" for a tuned row or one without a window."""
    low, high = row.get("window_low", math.nan), row.get("window_high", math.nan)
    if tuned or pd.isna(low) or pd.isna(high):
        return "—"
    return window_text(low, high)


def row_verdict(before: str, after: str, labels: tuple[str, str] = ("narrow", "wide"), factor: str = "width") -> str:
    """`before` and `after`: the row's reading against the baseline at the narrow and the wide width (`labels`), or
    on the two sides of another `factor` (optimizer, recipe)."""
    decided = {BASELINE_VERDICTS.above, BASELINE_VERDICTS.below}
    if before in decided and after in decided:
        return holds(factor) if before == after else MOVES
    one = [(word, label) for word, label in zip((before, after), labels, strict=True) if word in decided]
    return f"{one[0][0]} at {one[0][1]} only" if one else NOISE


def width_rows(narrow: Side, wide: Side, baseline: str, factor: str = "width") -> tuple[pd.DataFrame, str]:
    """Per (depth, row both ran): its score (the mean of `quantity`, the quantity returned), selected lr (e: at an
    edge of the lrs tried), lr window, rank and gap to `baseline` in each folder, and the verdict across the `factor`
    the two folders differ in; and the quantity read."""
    both = finished(narrow.selected) and finished(wide.selected)
    column = "mean" if both else "select_mean"
    rows = []
    for depth in sorted(set(narrow.selected["depth"]) & set(wide.selected["depth"])):
        per = [s.selected[s.selected["depth"] == depth].set_index("layer") for s in (narrow, wide)]
        common = [layer for layer in per[1].index if layer in per[0].index]
        if baseline not in common:
            continue
        ranked = [p.loc[common, column].rank(ascending=False, method="min").astype(int) for p in per]
        for layer in sorted(common, key=lambda x: (ranked[1][x], x)):
            line: dict[str, str] = {"depth": str(depth), "layer": layer}
            words = []
            for s, p, r in zip((narrow, wide), per, ranked, strict=True):
                gap = p.loc[layer, column] - p.loc[baseline, column]
                word = "—"
                if both and layer != baseline:
                    v = s.versus[(s.versus["depth"] == depth) & (s.versus["layer"] == layer)]
                    word = reading(v["mean"].iloc[0], v["p_holm"].iloc[0], BASELINE_VERDICTS) if len(v) else "—"
                words.append(word)
                edge = " e" if p.loc[layer].get("edge") in ("low", "high") and not s.tuned else ""
                score = p.loc[layer, column]
                line |= {f"{s.label}: score": "—" if math.isnan(score) else f"{score:.2f}",
                         f"{s.label}: lr": f"{lr_text(p.loc[layer, 'lr'])}{edge}",
                         f"{s.label}: lr window": window_cell(p.loc[layer], s.tuned),
                         f"{s.label}: rank": f"{r[layer]} of {len(common)}",
                         f"{s.label}: gap to {baseline}": "—" if layer == baseline or math.isnan(gap)
                         else f"{gap:+.1f}" + (f" ({word})" if both else "")}
            line[f"across {factor}"] = ("baseline" if layer == baseline
                                        else row_verdict(*words, labels=(narrow.label, wide.label), factor=factor)
                                        if both else UNFINISHED)
            rows.append(line)
    return pd.DataFrame(rows), TEST if both else VAL


def regime_rows(reads: list[FolderRead]) -> pd.DataFrame:
    """Each folder's regime: width, depths, epochs, seeds, the lr range its selection seeds explored, convergence
    (by the 2x check where it ran, else the final-loss rule) and whether it finished."""
    rows = []
    for r in reads:
        a = r.analysis
        selecting = a.cells[a.cells["role"] == "select"] if "role" in a.cells else a.cells
        report = sorted(int(s) for s in a.cells[a.cells["role"] == REPORTS]["seed"].unique()) \
            if "role" in a.cells else []
        converged = int(a.selected["converged"].eq(True).sum())
        check = "2x check" if not a.budget.empty else "final-loss rule, unconfirmed: no 2x cells"
        rows.append({"folder": f"`{folder_name(r, reads)}`", "width": str(width_of(r)),
                     **({"optimizer": optimizer_of(r)} if len({optimizer_of(x) for x in reads}) > 1 else {}),
                     **({"recipe": recipe_of(r)} if len({recipe_of(x) for x in reads}) > 1 else {}),
                     "depth": ", ".join(str(d) for d in sorted(a.selected["depth"].unique())),
                     "epochs": str(epochs_of(r)),
                     "selection seeds": str(sorted(int(s) for s in selecting["seed"].unique())),
                     "report seeds": str(report) if report else "none",
                     "lrs explored": f"{lr_text(selecting['lr'].min())}–{lr_text(selecting['lr'].max())}",
                     "rows converged": f"{converged} of {len(a.selected)} ({check})",
                     "status": "finished" if finished(a.selected)
                     else "unfinished: no report-seed scores for every row"})
    return pd.DataFrame(rows)
