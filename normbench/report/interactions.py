"""Interaction claims read across two folders (contracts/interactions.py): is a row's gap to its rival larger in
one folder (the "here" side, whose suite declares the claim) than in the other?

Per report seed s both folders trained for both rows at their own selected lrs: d(s) = (rival - row) here minus
(rival - row) there, a difference of paired differences. The same seed number starts both folders' cells from the
same data order (and, where the shapes match, the same initial weights), so the seeds pair across folders as they
pair within one; a seed whose cells trained on different device classes is no pair (contracts/devices.py), here as
in every paired comparison. Only report cells count: the selection seeds chose each row's lr, so testing on them
would reuse what picked the lr. The test is the claims' paired t test on d (two-sided, Holm over every interaction of
the comparison); "no effect found" is TOST within +-margin (the interaction's, else the suite's `sequential.margin`);
the detectable effect is stated at each interaction's Holm level. Read once, at the seeds the folders hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from normbench.contracts.devices import comparable
from normbench.contracts.interactions import Interaction
from normbench.contracts.selection import REPORTS, ROLE
from normbench.report.claims import no_effect_p
from normbench.report.folder import FolderRead
from normbench.report.stats import (
    ALPHA,
    CLAIM_VERDICTS,
    NO_EFFECT,
    UNDERPOWERED,
    detectable_effect,
    holm,
    holm_levels,
    paired_p,
    seed_differences,
    t_interval,
)
from normbench.report.tables import markdown_table, p_text

BOUNDS = (-200.0, 200.0)  # a difference of two differences of top-1 points
GAP_BOUNDS = (-100.0, 100.0)
NO_PAIRS = "— (fewer than 2 paired seeds)"


def gaps(read: FolderRead, spec: Interaction, where: dict[str, Any]) -> tuple[dict[int, tuple[float, str]], list[int]]:
    """Per report seed of `read` within `where`: (gap_to minus layer at their selected lrs, the pair's device class),
    and the seeds left out for mixing devices within the folder."""
    a = read.analysis
    report = a.cells[a.cells[ROLE] == REPORTS] if ROLE in a.cells else a.cells.iloc[0:0]
    return seed_differences(report, a.selected, a.keys, where, spec.gap_to, spec.layer)


def groups(read: FolderRead, depth: int) -> list[dict[str, Any]]:
    """The row groups of `read` at `depth`: one `where` per value of its other row and table keys (one, {depth},
    for a folder whose matrix varies only layer, depth, lr and seed)."""
    a = read.analysis
    extra = [k for k in a.keys if k not in ("layer", "depth")]
    at_depth = a.selected[a.selected["depth"] == depth]
    if not extra or at_depth.empty:
        return [{"depth": depth}]
    return [{"depth": depth, **dict(zip(extra, key if isinstance(key, tuple) else (key,), strict=True))}
            for key, _ in at_depth.groupby(extra, sort=True, dropna=False)]


def interaction_rows(here: FolderRead, there: FolderRead, here_label: str, there_label: str) -> list[dict[str, Any]]:
    """One row per interaction `here`'s suite declares (and per row group), read against `there`, before the
    family's Holm adjustment (`adjusted`)."""
    rows = []
    for spec in here.suite.interactions:
        for where in groups(here, spec.depth):
            (near, near_mixed), (far, far_mixed) = gaps(here, spec, where), gaps(there, spec, where)
            both = sorted((set(near) | set(near_mixed)) & (set(far) | set(far_mixed)))
            seeds = [s for s in both if s in near and s in far and comparable(near[s][1], far[s][1])]
            pairs = [(s, near[s][0] - far[s][0]) for s in seeds]
            unscored = [s for s, d in pairs if not math.isfinite(d)]
            pairs = [(s, d) for s, d in pairs if math.isfinite(d)]
            differences = [d for _, d in pairs]
            margin = spec.margin if spec.margin is not None else here.suite.sequential.margin
            mean, low, high = t_interval(differences, bounds=BOUNDS)
            extra = ", ".join(f"{k} {v}" for k, v in where.items() if k != "depth")
            rows.append({"claim": spec.text(here_label, there_label) + (f" ({extra})" if extra else ""),
                         "here": here_label, "there": there_label,
                         "gap here": _mean([near[s][0] for s, _ in pairs]),
                         "gap there": _mean([far[s][0] for s, _ in pairs]),
                         "mean": mean, "low": low, "high": high, "n": len(differences), "seeds": [s for s, _ in pairs],
                         "cross_device": len(both) - len(seeds), "unscored": len(unscored),
                         "missing": [label for label, g, mixed in
                                     ((here_label, near, near_mixed), (there_label, far, far_mixed))
                                     if not g and not mixed],
                         "sd": float(np.std(differences, ddof=1)) if len(differences) > 1 else math.nan,
                         "p": paired_p(differences), "margin": margin if margin is not None else math.nan,
                         "p_equiv": no_effect_p(differences, margin or 0.0)})
    return rows


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def adjusted(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a frame with Holm over all of them (the comparison's family of interactions), each row's Holm
    level, its detectable effect there, and its verdict."""
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame["p_holm"] = holm(frame["p"])
    frame["p_equiv_holm"] = holm(frame["p_equiv"])
    frame["level"] = holm_levels(frame["p"])
    frame["detectable"] = [detectable_effect(r.n, r.sd, r.level) if r.level == r.level else math.nan
                           for r in frame.itertuples()]
    frame["verdict"] = [interaction_verdict(r) for _, r in frame.iterrows()]
    return frame


def interaction_frame(here: FolderRead, there: FolderRead, here_label: str, there_label: str) -> pd.DataFrame:
    """`here`'s interactions read against `there`, Holm over them alone (one pair of folders)."""
    return adjusted(interaction_rows(here, there, here_label, there_label))


def interaction_verdict(row: pd.Series) -> str:
    """Below two paired seeds, none: nothing was tested. Else supported / contradicted by the sign of the mean where
    the Holm p is below ALPHA; "no effect found" where TOST's Holm p is; else underpowered."""
    if row["n"] < 2:
        return NO_PAIRS
    if row["p_holm"] < ALPHA:
        return CLAIM_VERDICTS.above if row["mean"] > 0 else CLAIM_VERDICTS.below
    if row["p_equiv_holm"] < ALPHA:
        return NO_EFFECT
    return UNDERPOWERED


def interaction_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as the comparison prints it: one decimal for points, rounded once from full precision."""
    rows = []
    for _, r in frame.iterrows():
        missing = f" (no report seeds of both rows in {', '.join(r['missing'])})" if r["missing"] else ""
        left_out = [f"{r['cross_device']} left out: devices differ"] * bool(r["cross_device"]) + \
            [f"{r['unscored']} without a score"] * bool(r["unscored"])
        rows.append({"interaction": r["claim"] + missing,
                     "gap, first regime named": _points(r["gap here"]),
                     "gap, second": _points(r["gap there"]),
                     "difference of gaps [95% CI]": "—" if r["n"] < 2 else
                     f"{r['mean']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}]",
                     "n (paired seeds)": str(r["n"]) + (f" ({'; '.join(left_out)})" if left_out else ""),
                     "p (Holm)": p_text(r["p_holm"]),
                     "no effect (TOST, Holm)": "— (no margin)" if r["margin"] != r["margin"] else
                     f"±{r['margin']:g}: p {p_text(r['p_equiv_holm'])}",
                     "detectable at 80% power (points)": "—" if r["detectable"] != r["detectable"] else
                     f"{r['detectable']:.2f} at α {r['level']:.3g}",
                     "verdict": r["verdict"]})
    return pd.DataFrame(rows)


def _points(value: float) -> str:
    return "—" if value != value else f"{value:+.1f}"


def interaction_lines(reads: Sequence[FolderRead], labels: Sequence[str]) -> list[str]:
    """The interactions section of a comparison: every folder whose suite declares interactions, read against each
    other folder, in one table and one Holm family; nothing when none declares any."""
    rows = [row for i, here in enumerate(reads) for j, there in enumerate(reads)
            if i != j and here.suite.interactions for row in interaction_rows(here, there, labels[i], labels[j])]
    if not rows:
        return []
    return ["## interactions: is a row's gap to its rival larger under one regime than the other? (per report seed "
            "both folders trained, the rival minus the row in one folder minus the same in the other, each row at its "
            "own val-selected lr, on one device class; gaps are the means over those seeds; paired t test on these "
            f"differences of differences, Holm over this table: supported/contradicted where p < {ALPHA:g}, no "
            "effect found where two one-sided tests put it within ± the margin; else underpowered)", "",
            markdown_table(interaction_table(adjusted(rows))), ""]
