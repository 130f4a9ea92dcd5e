"""The largest attention logit of each row in each folder of a comparison: how far the optimizer (or the width, or
the budget) lets q·k/√d_h grow, and whether QK-norm holds it (Kimi K2 added QK-Clip because Muon grows it).

Read from the telemetry each cell recorded (train/telemetry.py `attn_logit_max`, every `train.telemetry_every`
steps): per cell at its row's val-selected lr, the largest over blocks at the last observed step, and the largest
over blocks and steps; then the mean over the cells that scored (report seeds; 2x cells left out). A folder that
recorded no telemetry reads the re-runs scripts/attention_logits.py wrote beside its ledger (`RERUNS`: each row's
report cell trained again with telemetry on, at the lr the row has selected now), else shows "—" and says so.
Beside a folder read from re-runs, the others are read on the re-runs' seeds only: like for like.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from normbench.contracts.selection import BUDGETS, REPORTS, ROLE
from normbench.report.folder import FolderRead, folder_name
from normbench.report.tables import markdown_table
from normbench.report.telemetry_figures import telemetry_frame

QUANTITY = "attn_logit_max"
RERUNS = "attention-logits.csv"  # scripts/attention_logits.py's records, in the folder they re-ran cells of


def logit_summary(read: FolderRead, seeds: set[int] | None = None) -> pd.DataFrame:
    """Per (depth, layer): `final` and `peak` (seed means, see above) and `n` cells, from the folder's own telemetry
    (only its cells of `seeds` when given: the seeds another folder's re-runs trained), else from its re-runs
    (attrs["source"] says which); empty when neither has any."""
    if recorded(read):
        frame = telemetry_frame(read.cells)
        cells = scoring_cells(at_selected_lrs(frame, read.analysis.selected, read.analysis.keys))
        if seeds and "seed" in cells:
            cells = cells[cells["seed"].isin(seeds)]
        return _per_row(cells, "telemetry")
    return _per_row(rerun_records(read), RERUNS)


def at_selected_lrs(frame: pd.DataFrame, selected: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The records of each row's cells at the lr the folder's analysis selected (the one its tables score); `keys`:
    the analysis's row and table keys."""
    on = [k for k in dict.fromkeys([*keys, "lr"]) if k in frame and k in selected]
    return frame.merge(selected[on].drop_duplicates(), on=on)


def rerun_records(read: FolderRead) -> pd.DataFrame:
    """The folder's re-run records at each row's current selected lr (a re-run at an lr the row has since left is
    not its logit), with a cell_id per re-run; empty without the file."""
    path = Path(read.path) / RERUNS
    if not path.is_file():
        return pd.DataFrame()
    records = pd.read_csv(path)
    current = records.merge(read.analysis.selected[["layer", "depth", "lr"]], on=["layer", "depth", "lr"])
    axes = zip(current["layer"], current["depth"], current["lr"], current["seed"], strict=True)
    return current.assign(cell_id=[f"{layer},{depth},{lr!r},{seed}" for layer, depth, lr, seed in axes])


def _per_row(cells: pd.DataFrame, source: str) -> pd.DataFrame:
    if cells.empty or QUANTITY not in cells:
        return pd.DataFrame()
    per_cell = []
    for _, cell in cells.groupby("cell_id"):
        last = cell[cell["step"] == cell["step"].max()]
        per_cell.append({"depth": cell["depth"].iloc[0], "layer": cell["layer"].iloc[0],
                         "final": last[QUANTITY].max(), "peak": cell[QUANTITY].max()})
    summary = pd.DataFrame(per_cell).groupby(["depth", "layer"]).agg(
        final=("final", "mean"), peak=("peak", "mean"), n=("final", "size")).reset_index()
    summary.attrs["source"] = source
    return summary


def recorded(read: FolderRead) -> bool:
    """Whether any of the folder's cells recorded the largest attention logit."""
    frame = telemetry_frame(read.cells)
    return not frame.empty and QUANTITY in frame and not frame[QUANTITY].isna().all()


def scoring_cells(at_best: pd.DataFrame) -> pd.DataFrame:
    """Per layer, its report cells where it has any, else its selection cells (a folder whose report stage has not
    reached the row yet); 2x cells never."""
    if ROLE not in at_best:
        return at_best
    at_best = at_best[at_best[ROLE] != BUDGETS]
    reported = at_best.groupby("layer")[ROLE].transform(lambda roles: (roles == REPORTS).any())
    return at_best[(at_best[ROLE] == REPORTS) | ~reported.astype(bool)]


def logit_lines(reads: Sequence[FolderRead], labels: Sequence[str]) -> list[str]:
    """The comparison's section: a row per layer any folder recorded, each folder's final and peak largest logit
    (3 significant digits); nothing when no folder recorded telemetry."""
    # a folder read from re-runs has one cell a row (scripts/attention_logits.py): the others are read on the same
    # seeds, so both sides are the same cells under two recipes, not one cell against a mean over 4 to 16
    rerun_seeds = {int(s) for r in reads for s in rerun_records(r).get("seed", [])}
    summaries = [logit_summary(r) for r in reads]
    if rerun_seeds and any(s.attrs.get("source") == RERUNS for s in summaries):
        summaries = [s if s.attrs.get("source") == RERUNS else logit_summary(r, rerun_seeds)
                     for r, s in zip(reads, summaries, strict=True)]
    if all(s.empty for s in summaries):
        return []
    keys = sorted({(int(d), str(layer)) for s in summaries if not s.empty for d, layer in zip(s["depth"], s["layer"],
                                                                                             strict=True)})
    table = []
    for depth, layer in keys:
        line = {"depth": str(depth), "layer": layer}
        for label, s in zip(labels, summaries, strict=True):
            row = s[(s["depth"] == depth) & (s["layer"] == layer)] if not s.empty else s
            n = int(row["n"].iloc[0]) if len(row) else 0
            final, peak = ((f"{row['final'].iloc[0]:.3g}", f"{row['peak'].iloc[0]:.3g} ({n} cell{'s' * (n != 1)})")
                           if len(row) else ("—", "—"))
            line |= {f"{label}: at the end": final, f"{label}: peak in training": peak}
        table.append(line)
    empty = [r for r, s in zip(reads, summaries, strict=True) if s.empty]
    silent = [f"`{folder_name(r, reads)}`" for r in empty if not recorded(r)]
    waiting = [f"`{folder_name(r, reads)}`" for r in empty if recorded(r)]  # telemetry, on none of the cells read
    reran = [f"`{folder_name(r, reads)}`" for r, s in zip(reads, summaries, strict=True)
             if s.attrs.get("source") == RERUNS]
    note = ([f"{', '.join(silent)} recorded no attention telemetry (no cell holds `{QUANTITY}`: its suite's "
             "`train.telemetry_every` is 0, or its cells predate the quantity) and has no re-runs: its columns are "
             "empty, not zero.", ""] if silent else [])
    note += ([f"{', '.join(reran)} trained without telemetry: its columns are re-runs of report cells at each row's "
              f"selected lr with telemetry on (scripts/attention_logits.py, `{RERUNS}` in the folder); every "
              f"folder's columns read the re-runs' seed{'s' * (len(rerun_seeds) != 1)} "
              f"({', '.join(map(str, sorted(rerun_seeds)))}), so each row compares the same cells.", ""]
             if reran else [])
    where = (f"no cell of the seed{'s' * (len(rerun_seeds) != 1)} compared ({', '.join(map(str, sorted(rerun_seeds)))})"
             " yet: its report stage has not trained them" if rerun_seeds
             else "none of the cells this table reads (each row's scoring cells at its selected lr)")
    note += ([f"{', '.join(waiting)} recorded attention telemetry, but on {where}; its columns are empty, not zero.",
              ""] if waiting else [])
    return ["## largest attention logit q·k/√d_h in each folder (telemetry, max over blocks; each row at its "
            "val-selected lr, mean over its scoring cells: at the last observed step, and the peak over training)",
            "", markdown_table(pd.DataFrame(table)), "", *note]
