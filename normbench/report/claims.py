"""A suite's claims read against its cells: a verdict per claim that more seeds can settle (docs/protocol.md).

A claim is {layer, beats, depth, by (default 0), claimed (optional)}: "`layer` beats `beats` at `depth` by more than
`by` points" (the source reported a gain of `claimed`); or, with `steadier_than`, "`layer`'s lr sensitivity is below
the rival's by more than `by`" (stats.sensitivity_difference). Each is tested on the paired differences of its two
rows, two ways:

- **a difference**: the paired t test against `by`. A claim on report seeds is group-sequential
  (report/sequential.py): it is looked at after each round of report seeds, each look against the boundary the
  suite's spending function gives at n / `max_seeds`, and its p is the repeated p-value over the looks so far. A
  claim on selection seeds (a steadiness claim, or a suite without report seeds) has one look at the full level.
- **no effect**: two one-sided tests (TOST; Schuirmann 1987) that the difference lies within ± the margin of 0: the
  source's claimed effect, else a nonzero `by`, else the suite's `sequential.margin`; none without any. Looked at the
  same way.

Both are Holm-adjusted over the suite's claims. Verdicts: supported / contradicted (the difference test decides,
by the side of `by` its mean lies), "no effect found" (TOST decides), else "open" while a sequential claim's rows
may get another round of report seeds that could decide it, else "underpowered". A round is worth it only if, at
the cap, the test could detect an effect as large as the larger of the margin and the difference seen so far (taking
the pairs' sd as the true one: stats.detectable_effect at the last look's nominal level); else the claim stops as
underpowered, and no compute is spent on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from normbench.contracts.claim_rounds import ClaimRounds
from normbench.contracts.suite import Suite, claim_rival
from normbench.report.sequential import look_sizes, repeated_p, t_levels
from normbench.report.stats import (
    ALPHA,
    CLAIM_VERDICTS,
    NO_EFFECT,
    UNDERPOWERED,
    detectable_effect,
    fell_back,
    holm,
    holm_levels,
    paired_difference,
    paired_p,
    sensitivity_difference,
)

OPEN = "open"  # a sequential claim another round of report seeds could still decide


@dataclass(frozen=True)
class Looks:
    """A claim's looks: pair counts, the design's cap, and per look the two tests' p-values."""

    sizes: list[int]
    cap: int
    p_difference: list[float]
    p_no_effect: list[float]


def looks_of(differences: Sequence[float], by: float, margin: float, sizes: list[int], cap: int) -> Looks:
    """The p-values of both tests on the first `s` differences (seed order: rounds in order) for each look size."""
    sizes = [s for s in sizes if s <= cap]
    return Looks(sizes, cap, [paired_p(differences[:s], by) for s in sizes],
                 [no_effect_p(differences[:s], margin) for s in sizes])


def no_effect_p(differences: Sequence[float], margin: float) -> float:
    """TOST: the larger of the one-sided p-values that the mean difference lies above `-margin` and below `+margin`:
    no effect, whatever `by` the claim names (an equivalence around `by` would call a gain that replicates a
    "beats by 3.4" claim "no effect"); NaN without a margin or below two pairs."""
    if not margin > 0 or len(differences) < 2:
        return math.nan
    return max(paired_p(differences, -margin, "greater"), paired_p(differences, margin, "less"))


def round_seeds(suite: Suite, tuned: bool) -> int:
    """The report seeds a claim round adds (check_claims' `round_seeds`): the suite's under `run`; none in a folder
    `tune` wrote, which runs no claim rounds, so its claims get one look at the full level, not a sequential design's
    first look."""
    return 0 if tuned else len(suite.report_seeds)


def check_claims(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], claims: list[dict[str, object]],
                 rounds: ClaimRounds | None = None, round_seeds: int = 0) -> pd.DataFrame:
    """One row per claim (per combination of the other axes at its depth). `rounds` is the suite's sequential design
    (ClaimRounds() when None) and `round_seeds` the seeds a round adds (the suite's report seeds; 0: no rounds).

    Columns added: n, mean, low, high, sd, p (against 0), p_by (against `by`, all pairs), differences, sequential,
    looks (pair counts looked at), p_seq (the difference test's repeated p), p_holm, alpha (Holm's level for the
    claim's rank), boundary (the nominal level its last look is compared with at that level), margin, p_equiv
    (TOST's repeated p), p_equiv_holm, detectable (at 80% power at `detectable_level`, the look's boundary, with
    these pairs), reference (the source's
    effect, else the margin), cap_detectable (the same at the cap), verdict."""
    rounds = rounds or ClaimRounds()
    rows = []
    group_keys = [k for k in keys if k not in ("layer", "depth")]
    for claim in claims:
        at_depth = selected[selected["depth"] == claim["depth"]]
        groups = at_depth.groupby(group_keys, dropna=False) if group_keys else [((), at_depth)]
        for key, _ in groups:
            where = {**dict(zip(group_keys, key if isinstance(key, tuple) else (key,), strict=True)),
                     "depth": claim["depth"]}
            by = float(claim.get("by", 0.0))  # type: ignore[arg-type]
            kind, rival = claim_rival(claim)
            difference = paired_difference if kind == "beats" else sensitivity_difference
            diff = difference(cells, selected, keys, where, str(claim["layer"]), rival, by)
            rows.append({**claim, **where, "by": by, **diff})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    claimed = frame["claimed"] if "claimed" in frame else pd.Series(math.nan, index=frame.index)
    suite_margin = rounds.margin if rounds.margin else math.nan
    frame["margin"] = [abs(c) if c == c else abs(by) if by else suite_margin  # a claimed size, a `by`, the suite's
                       for c, by in zip(claimed, frame["by"], strict=True)]
    frame["reference"] = frame["margin"]
    frame["sequential"] = [round_seeds > 0 and _on_report_seeds(c) for _, c in frame.iterrows()]
    looks = [_looks(c, rounds, round_seeds) for _, c in frame.iterrows()]
    frame["looks"] = [lk.sizes for lk in looks]
    frame["p_seq"] = [_repeated(lk.p_difference, lk, rounds) for lk in looks]
    frame["p_equiv"] = [_repeated(lk.p_no_effect, lk, rounds) for lk in looks]
    frame["p_holm"] = holm(frame["p_seq"])
    frame["alpha"] = holm_levels(frame["p_seq"])
    frame["p_equiv_holm"] = holm(frame["p_equiv"])
    frame["boundary"] = [t_levels(lk.sizes, lk.cap, a, rounds.spending)[-1] if lk.sizes and a == a
                         else math.nan for lk, a in zip(looks, frame["alpha"], strict=True)]
    # what this look could detect: at the level its p was compared with (the boundary; a single look's is `alpha`)
    frame["detectable_level"] = [b if b == b else a for b, a in zip(frame["boundary"], frame["alpha"], strict=True)]
    frame["detectable"] = [detectable_effect(n, sd, a) if a == a else math.nan
                           for n, sd, a in zip(frame["n"], frame["sd"], frame["detectable_level"], strict=True)]
    frame["cap_detectable"] = [_cap_detectable(c, lk, rounds) for (_, c), lk in zip(frame.iterrows(), looks,
                                                                                      strict=True)]
    frame["verdict"] = [claim_verdict(c, rounds) for _, c in frame.iterrows()]
    return frame


def _on_report_seeds(claim: pd.Series) -> bool:
    kind, _ = claim_rival(claim)
    return kind == "beats" and not fell_back(claim)


def _looks(claim: pd.Series, rounds: ClaimRounds, round_seeds: int) -> Looks:
    differences = list(claim.get("differences") or [])
    n = len(differences)
    if claim["sequential"]:
        sizes, cap = look_sizes(n, round_seeds), max(rounds.max_seeds, n)
    else:  # one look at the full level: the design's one fraction is 1
        sizes, cap = ([n] if n >= 2 else []), max(n, 1)
    return looks_of(differences, claim["by"], claim["margin"], sizes, cap)


def _repeated(pvalues: list[float], looks: Looks, rounds: ClaimRounds) -> float:
    if not looks.sizes or all(p != p for p in pvalues):
        return math.nan
    return repeated_p(pvalues, looks.sizes, looks.cap, rounds.spending)


def _cap_detectable(claim: pd.Series, looks: Looks, rounds: ClaimRounds) -> float:
    """The effect the difference test detects with 80% power at the cap's look (the pairs' sd taken as true, at the
    nominal level the design gives the cap's look after the looks so far); NaN for a claim with no rounds left."""
    alpha = claim["alpha"]
    if not claim["sequential"] or claim["n"] >= looks.cap or not looks.sizes or alpha != alpha:
        return math.nan
    level = t_levels([*looks.sizes, looks.cap], looks.cap, alpha, rounds.spending)[-1]
    return detectable_effect(looks.cap, claim["sd"], level)


def claim_verdict(claim: pd.Series | dict, rounds: ClaimRounds) -> str:
    """supported / contradicted where the difference test's Holm-adjusted repeated p is below ALPHA (by the side of
    `by` its mean lies); "no effect found" where TOST's is; else "open" while a round of seeds could decide it (a
    sequential claim below the cap whose cap could detect an effect as large as the larger of the margin and the
    difference seen), else "underpowered"."""
    if claim["p_holm"] < ALPHA:
        return CLAIM_VERDICTS.above if claim["mean"] > claim["by"] else CLAIM_VERDICTS.below
    if claim["p_equiv_holm"] < ALPHA:
        return NO_EFFECT
    worth = max(abs(claim["mean"] - claim["by"]) if claim["mean"] == claim["mean"] else 0.0,
                claim["margin"] if claim["margin"] == claim["margin"] else 0.0)
    if claim["cap_detectable"] == claim["cap_detectable"] and claim["cap_detectable"] <= worth:
        return OPEN
    return UNDERPOWERED


def open_claims(claims: pd.DataFrame) -> pd.DataFrame:
    """The claims another round of report seeds may decide."""
    return claims[claims["verdict"] == OPEN] if not claims.empty else claims

