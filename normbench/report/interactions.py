"""Interaction claims read across two folders (contracts/interactions.py): is a row's gap to its rival larger in
one folder (the "here" side, whose suite declares the claim) than in the other?

Per report seed s both folders trained for both rows at their own selected lrs: d(s) = (rival - row) here minus
(rival - row) there, a difference of paired differences. The same seed number starts both folders' cells from the
same initial weights and data order, so the seeds pair across folders as they pair within one; a seed whose cells
trained on different device classes is no pair (contracts/devices.py), here as in every paired comparison. The
test is the claims' paired t test on d (two-sided, Holm over the interactions of the comparison); "no effect found"
is TOST within +-margin (the interaction's, else the suite's `sequential.margin`); the detectable effect is stated
at each interaction's Holm level. Read once, at the seeds the folders hold: no sequential looks (the rounds that
add seeds belong to each folder's own claims).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from normbench.contracts.devices import comparable
from normbench.contracts.interactions import Interaction
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
    reporting,
    seed_differences,
    t_interval,
)
from normbench.report.stats import DIFFERENCE as BOUNDS
from normbench.report.tables import markdown_table, p_text


def gaps(read: FolderRead, spec: Interaction) -> tuple[dict[int, tuple[float, str]], int]:
    """Per report seed of `read`: (gap_to minus layer at their selected lrs, the pair's device class), and the seeds
    left out for mixing devices within the folder."""
    a = read.analysis
    return seed_differences(reporting(a.cells, a.keys), a.selected, a.keys, {"depth": spec.depth}, spec.gap_to,
                            spec.layer)


def interaction_frame(here: FolderRead, there: FolderRead, here_label: str, there_label: str) -> pd.DataFrame:
    """One row per interaction `here`'s suite declares, read against `there`: each side's mean gap, the
    difference of gaps with its interval, n, cross-device seeds left out, p and TOST p (Holm over these rows), the
    detectable effect at each row's Holm level, and the verdict."""
    rows = []
    for spec in here.suite.interactions:
        (near, near_cross), (far, far_cross) = gaps(here, spec), gaps(there, spec)
        shared = sorted(set(near) & set(far))
        seeds = [s for s in shared if comparable(near[s][1], far[s][1])]
        differences = [near[s][0] - far[s][0] for s in seeds]
        margin = spec.margin if spec.margin is not None else here.suite.sequential.margin
        mean, low, high = t_interval(differences, bounds=BOUNDS)
        rows.append({"claim": spec.text(here_label, there_label), "here": here_label, "there": there_label,
                     "gap here": _mean_gap([g for g, _ in near.values()]),
                     "gap there": _mean_gap([g for g, _ in far.values()]),
                     "mean": mean, "low": low, "high": high, "n": len(differences), "seeds": seeds,
                     "cross_device": near_cross + far_cross + len(shared) - len(seeds),
                     "missing": [side for side, g in ((here_label, near), (there_label, far)) if not g],
                     "sd": float(pd.Series(differences).std(ddof=1)) if len(differences) > 1 else math.nan,
                     "p": paired_p(differences), "margin": margin if margin is not None else math.nan,
                     "p_equiv": no_effect_p(differences, margin or 0.0)})
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


def _mean_gap(values: Sequence[float]) -> tuple[float, float, float, int]:
    return (*t_interval(values, bounds=BOUNDS), len(values))


def interaction_verdict(row: pd.Series) -> str:
    """supported / contradicted by the sign of the mean where the Holm p is below ALPHA; "no effect found" where
    TOST's Holm p is; else underpowered (these seeds could not tell)."""
    if row["p_holm"] < ALPHA:
        return CLAIM_VERDICTS.above if row["mean"] > 0 else CLAIM_VERDICTS.below
    if row["p_equiv_holm"] < ALPHA:
        return NO_EFFECT
    return UNDERPOWERED


def interaction_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as the comparison prints it: one decimal for points, rounded once from full precision."""
    def gap(value: tuple[float, float, float, int]) -> str:
        mean, low, high, n = value
        return "—" if n == 0 else f"{mean:+.1f} [{low:+.1f}, {high:+.1f}], {n} seeds"

    rows = []
    for _, r in frame.iterrows():
        missing = f" (no report seeds of both rows in {', '.join(r['missing'])})" if r["missing"] else ""
        rows.append({"interaction": r["claim"] + missing,
                     f"gap under {r['here']}": gap(r["gap here"]), f"gap under {r['there']}": gap(r["gap there"]),
                     "difference of gaps [95% CI]": "—" if r["n"] == 0 else
                     f"{r['mean']:+.1f} [{r['low']:+.1f}, {r['high']:+.1f}]",
                     "n (paired seeds)": str(r["n"]) + (f" ({r['cross_device']} left out: devices differ)"
                                                        if r["cross_device"] else ""),
                     "p (Holm)": p_text(r["p_holm"]),
                     "no effect (TOST, Holm)": "— (no margin)" if r["margin"] != r["margin"] else
                     f"±{r['margin']:g}: p {p_text(r['p_equiv_holm'])}",
                     "detectable at 80% power (points)": "—" if r["detectable"] != r["detectable"] else
                     f"{r['detectable']:.2f} at α {r['level']:.3g}",
                     "verdict": r["verdict"]})
    return pd.DataFrame(rows)


def interaction_lines(reads: Sequence[FolderRead], labels: Sequence[str]) -> list[str]:
    """The interactions section of a comparison: each folder whose suite declares interactions, read against each
    other folder; nothing when none declares any."""
    lines = []
    for i, here in enumerate(reads):
        for j, there in enumerate(reads):
            if i == j or not here.suite.interactions:
                continue
            frame = interaction_frame(here, there, labels[i], labels[j])
            lines += [f"## interactions: gaps larger under {labels[i]} than under {labels[j]}? (per report seed, the "
                      f"rival minus the row in `{here.path.name}` minus the same in `{there.path.name}`, each row at "
                      f"its own val-selected lr; paired t test on these differences of differences, Holm over this "
                      f"table; supported/contradicted where p < {ALPHA:g}, no effect found where two one-sided tests "
                      "put it within ± the margin; else underpowered)", "",
                      markdown_table(interaction_table(frame)), ""]
    return lines
