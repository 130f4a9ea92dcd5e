"""One grid trained at two or more budgets, in separate output folders, read side by side: which conclusions hold
in every regime and which change with the budget (`normbench compare EARLY CONVERGED`). Folders of one budget at
different model widths are lined up row by row instead (`compare_widths`, report/width.py).

Each folder keeps its own protocol (its selection seeds choose its lrs, its report seeds score them); this module
only lines the answers up: the final-accuracy tables, the rank agreement (report/budget.py's rho and exact
permutation p against the largest budget), every layer against the baseline and every claim in each regime.
Formats `FolderRead`s; computes nothing the leaderboards do not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from normbench.contracts.suite import claim_rival
from normbench.errors import NormbenchError
from normbench.report.attention_logits import logit_lines
from normbench.report.budget import BUDGET_AXIS, MIN_LAYERS, budget_agreement, budget_verdict
from normbench.report.claims import OPEN, check_claims, round_seeds
from normbench.report.folder import FolderRead, folder_name
from normbench.report.header import budget_text, converged_counts, regime_word, seeds_line
from normbench.report.interactions import interaction_lines
from normbench.report.rank_agreement import permutation_p, spearman, swapped_pairs
from normbench.report.stats import (
    ALPHA,
    REPORTS,
    UNDERPOWERED,
    fell_back,
    reading,
    versus_baseline,
)
from normbench.report.tables import (
    BASELINE_VERDICTS,
    budget_table,
    claim_text,
    detectable_text,
    markdown_table,
    p_text,
)
from normbench.report.union import compare_rows, union_refusal
from normbench.report.width import (
    VAL,
    converged_word,
    epochs_of,
    finished,
    optimizer_of,
    recipe_of,
    regime_rows,
    side,
    width_of,
    width_rows,
)

DIGITS = 1  # the comparison's tables: one decimal, rounded once from the full-precision means


def budget_of(read: FolderRead) -> int:
    if BUDGET_AXIS in read.suite.matrix:
        raise NormbenchError(f"{read.path}: its matrix varies `{BUDGET_AXIS}`; its own leaderboard compares its "
                             "budgets (\"does the ranking hold across budgets?\"); compare folders of one budget each")
    return int(read.suite.cell({}).config.train.epochs)


def ordered(reads: Sequence[FolderRead]) -> list[FolderRead]:
    """By budget, smallest first; two folders of one budget are refused (nothing to compare across)."""
    reads = sorted(reads, key=budget_of)
    budgets = [budget_of(r) for r in reads]
    if len(set(budgets)) != len(budgets):
        raise NormbenchError(f"two folders train the same number of epochs ({budgets}); compare runs of one grid at "
                             "different budgets")
    return reads


def shown_path(path: Path) -> str:
    """The folder as a reader types it: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def label(read: FolderRead) -> str:
    return f"{budget_of(read)} epochs"


def score_text(mean: float, low: float, high: float, best: bool) -> str:
    text = f"{mean:.{DIGITS}f}"
    interval = "" if math.isnan(low) or math.isnan(high) else f" [{low:.{DIGITS}f}, {high:.{DIGITS}f}]"
    return (f"**{text}**" if best else text) + interval


def runs_table(reads: Sequence[FolderRead]) -> pd.DataFrame:
    rows = []
    for r in reads:
        selected = r.analysis.selected
        converged, unconfirmed = converged_counts(selected)
        rows.append({"folder": f"`{folder_name(r, reads)}`", "budget": budget_text(r.analysis),
                     "seeds": seeds_line(r.cells).removeprefix("- seeds: ").split("; lrs tried")[0],
                     "rows converged": f"{converged} of {len(selected)}",
                     "regime": regime_word(converged, len(selected), unconfirmed).split(":")[0]})
    return pd.DataFrame(rows)


def depth_table(reads: Sequence[FolderRead], depth: int) -> pd.DataFrame:
    """Per layer: each regime's test top-1 [95% CI], rank and convergence; bold marks each column's true maximum
    (compared at full precision, not as printed)."""
    per_regime = {}
    for r in reads:
        rows = r.analysis.selected[r.analysis.selected["depth"] == depth].set_index("layer")
        rows = rows.assign(rank=rows["mean"].rank(ascending=False, method="min").astype(int))
        per_regime[label(r)] = rows
    layers = list(per_regime[label(reads[-1])].sort_values("mean", ascending=False, kind="stable").index)
    layers += [layer for rows in per_regime.values() for layer in rows.index if layer not in layers]
    table = []
    for layer in dict.fromkeys(layers):
        line: dict[str, str] = {"layer": layer}
        for name, rows in per_regime.items():
            if layer not in rows.index:
                line |= {f"{name}: test top-1 [95% CI]": "—", f"{name}: rank": "—", f"{name}: converged": "—"}
                continue
            row = rows.loc[layer]
            line |= {f"{name}: test top-1 [95% CI]": score_text(row["mean"], row["low"], row["high"],
                                                                 row["mean"] == rows["mean"].max()),
                     f"{name}: rank": str(row["rank"]),
                     f"{name}: converged": converged_word(row["converged"])}
        table.append(line)
    return pd.DataFrame(table)


def difference_text(mean: float, low: float, high: float) -> str:
    if math.isnan(mean):
        return "—"
    interval = "—" if math.isnan(low) or math.isnan(high) else f"[{low:.{DIGITS}f}, {high:.{DIGITS}f}]"
    return f"{mean:+.{DIGITS}f} {interval}"


def combined_selected(reads: Sequence[FolderRead]) -> pd.DataFrame:
    return pd.concat([r.analysis.selected.assign(**{BUDGET_AXIS: budget_of(r)}) for r in reads], ignore_index=True)


def change_word(before: str, after: str) -> str:
    if before == after:
        return "holds"
    decided = {BASELINE_VERDICTS.above, BASELINE_VERDICTS.below}
    if before in decided and after in decided:
        return "flips"
    return "appears with budget" if after in decided else "fades with budget" if before in decided else "changes"


def baseline_rows(read: FolderRead) -> pd.DataFrame:
    a = read.analysis
    return versus_baseline(a.cells, a.selected, a.keys, read.suite.baseline or "layernorm")


def baseline_table(reads: Sequence[FolderRead]) -> pd.DataFrame:
    """Every layer minus the baseline per depth, read (Holm within each folder, as its leaderboard does) in the
    smallest and the largest budget, and whether the reading holds."""
    first, last = reads[0], reads[-1]
    before, after = baseline_rows(first), baseline_rows(last)
    if before.empty or after.empty:
        return pd.DataFrame()
    merged = before.merge(after, on=["depth", "layer"], suffixes=("_a", "_b"))
    merged = merged.sort_values(["depth", "mean_b"], ascending=[True, False], kind="stable")
    rows = []
    for _, m in merged.iterrows():
        words = [reading(m[f"mean_{s}"], m[f"p_holm_{s}"], BASELINE_VERDICTS) for s in ("a", "b")]
        rows.append({"depth": str(m["depth"]), "layer": m["layer"],
                     **{f"{label(r)}: difference [95% CI]":
                        difference_text(m[f"mean_{s}"], m[f"low_{s}"], m[f"high_{s}"])
                        for r, s in ((first, "a"), (last, "b"))},
                     **{f"{label(r)}: reading (Holm p)": f"{w} ({p_text(m[f'p_holm_{s}'])})"
                        for r, s, w in ((first, "a", words[0]), (last, "b", words[1]))},
                     "across budgets": change_word(*words)})
    return pd.DataFrame(rows)


def claim_line(c: pd.Series, regime: str, axis: str = "budget") -> dict[str, str]:
    """One claim read in one regime, with the effect its test could detect at 80% power (as the leaderboard)."""
    return {"claim": claim_text(c), axis: regime,
            "difference [95% CI]": difference_text(c["mean"], c["low"], c["high"]),
            "p (sequential, Holm)": p_text(c["p_holm"]),
            "detectable at 80% power (points)": detectable_text(c["detectable"], c["detectable_level"], c["n"],
                                                                c["reference"]),
            "verdict": c["verdict"]}


def claim_across(verdicts: Sequence[str], regimes: Sequence[str], unfinished: bool) -> str:
    """How one claim's verdict moves across the regimes that read it: "holds" only where every regime decided it
    alike; a claim one regime lacks, or an unfinished regime, or tests too weak to decide, is named so, never
    counted as holding."""
    if len(set(regimes)) < 2:
        return f"{regimes[0]} only"
    if unfinished:
        return "cannot tell (unfinished)"
    decided = set(verdicts) - {UNDERPOWERED, OPEN}
    if not decided:
        return "undecided (open or underpowered in each)"
    if len(set(verdicts)) == 1:
        return "holds"
    if len(decided) > 1:
        return "changes"
    return f"decided in {sum(v not in (UNDERPOWERED, OPEN) for v in verdicts)} of {len(verdicts)}"


def paired_seeds(claim: pd.Series, selected: pd.DataFrame) -> str:
    """Which seeds a claim of an unfinished folder paired: its two rows' report seeds once both rows have them, else
    the selection seeds (stats.paired_difference's fallback; a steadiness claim always pairs those)."""
    kind, rival = claim_rival(claim)
    column = "seeds" if "seeds" in selected else "seeds_x"  # as width.finished reads it
    rows = selected[(selected["depth"] == claim["depth"]) & selected["layer"].isin([claim["layer"], rival])]
    on_report = kind == "beats" and not fell_back(claim) and len(rows) == 2 \
        and bool((rows[column] == REPORTS).all())
    return "report seeds" if on_report else "selection seeds"


def claims_rows(reads: Sequence[FolderRead], axis: str = "budget",
                regime_of: Callable[[FolderRead], str] | None = None) -> pd.DataFrame:
    rows, unfinished = [], set()
    for r in reads:
        if not r.suite.claims:
            continue
        claims = check_claims(r.analysis.cells, r.analysis.selected, r.analysis.keys, r.suite.claims,
                              r.suite.sequential, round_seeds(r.suite, r.tuned))
        done = finished(r.analysis.selected)
        regime = label(r) if axis == "budget" else regime_of(r) if regime_of else f"{axis} {width_of(r)}"
        lines = [claim_line(c, regime if done or axis == "budget" else
                            f"{regime} (unfinished: {c['n']} {paired_seeds(c, r.analysis.selected)})", axis)
                 for _, c in claims.iterrows()]
        unfinished |= set() if done else {line["claim"] for line in lines}
        rows += lines
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    across = {claim: claim_across(list(g["verdict"]), list(g[axis]), claim in unfinished)
              for claim, g in frame.groupby("claim", sort=False)}
    frame[f"across {axis}s"] = frame["claim"].map(across)
    return frame


# what two folders of one grid and one budget may differ in, each read as a side of the comparison: its name, the
# label a folder's side gets, and the order the sides are shown in (the reference first)
FACTORS: dict[str, tuple[Callable[[FolderRead], str], Callable[[FolderRead], Any]]] = {
    "width": (lambda r: f"width {width_of(r)}", width_of),
    "optimizer": (optimizer_of, lambda r: (optimizer_of(r) != "adamw", optimizer_of(r))),
    "recipe": (recipe_of, lambda r: r.tuned),
}


def differing(reads: Sequence[FolderRead]) -> list[str]:
    """The factors whose labels differ across `reads` (FACTORS' order)."""
    return [name for name, (label_of, _) in FACTORS.items() if len({label_of(r) for r in reads}) > 1]


def compare_sides(reads: Sequence[FolderRead], factor: str = "width") -> list[str]:
    """Two folders of one grid and one budget that differ in one `factor` (model width, optimizer, or grid against
    tuned recipes): each row's rank and gap to the baseline on either side (report/width.py), each folder's regime,
    and the claims in each."""
    label_of, order = FACTORS[factor]
    reads = sorted(reads, key=order)
    labels = [label_of(r) for r in reads]
    if len(set(labels)) != len(reads):
        raise NormbenchError(f"two folders share a {factor} ({labels}); compare folders that differ in one thing: "
                             "epochs, embed_dim, the optimizer, or grid against tuned")
    baseline = reads[-1].suite.baseline or "layernorm"
    table, quantity = width_rows(side(reads[0], baseline, labels[0]), side(reads[-1], baseline, labels[-1]),
                                 baseline, factor)
    names = " vs ".join(labels)
    what = {"width": "model widths", "optimizer": "optimizers", "recipe": "recipes: a grid over the lr against an "
            "equal Optuna budget per row over the whole recipe"}[factor]
    lines = [f"# normbench regimes: {names}", "",
             f"One grid at different {what}, each folder under its own protocol. Regenerate with "
             "`normbench compare " + " ".join(shown_path(r.path) for r in reads) + "`.", "",
             markdown_table(regime_rows(list(reads))), ""]
    if table.empty:
        lines += [f"No depth has {baseline} and another row in both folders: nothing to line up.", ""]
    else:
        lines += [f"## does each row's rank and gap to {baseline} hold across {factor}? (rank over the rows both "
                  f"folders ran; gap in points of {quantity}; {labels[0]} against {labels[-1]}: holds where both "
                  f"paired tests against {baseline} read the same (Holm p < {ALPHA:g}), moves where they read "
                  "opposite)", "", markdown_table(table), ""]
        lines += rank_correlation_lines(reads, labels)
    claims = claims_rows(reads, axis=factor, regime_of=label_of)
    if not claims.empty:
        lines += [f"## claims at each {factor} (paired t test against `by`, Holm over each folder's claims)", "",
                  markdown_table(claims), ""]
    return lines + interaction_lines(reads, labels) + logit_lines(reads, labels)


def rank_correlation_lines(reads: Sequence[FolderRead], labels: list[str]) -> list[str]:
    """Per depth, Spearman's rho of the scores of the rows both folders ran, with its one-sided exact permutation
    p, as the leaderboard's ranking checks read it (holds: rho > 0 and p < ALPHA). Not for width, whose folders
    state it in their own transfer section."""
    if labels[0].startswith("width "):
        return []
    rows = []
    first, last = reads[0].analysis.selected, reads[-1].analysis.selected
    both = finished(first) and finished(last)  # else the selection seeds' val, as the table above reads
    column = "mean" if both else "select_mean"
    for depth in sorted(set(first["depth"]) & set(last["depth"])):
        a, b = (f[f["depth"] == depth].set_index("layer")[column] for f in (first, last))
        layers = sorted(set(a.index) & set(b.index))
        x, y = a[layers].to_numpy(float), b[layers].to_numpy(float)
        enough = len(layers) >= MIN_LAYERS
        rho, p = (spearman(x, y), permutation_p(x, y)) if enough else (math.nan, math.nan)
        rows.append({"depth": str(depth), "rows": str(len(layers)), "rho": "—" if rho != rho else f"{rho:+.2f}",
                     "permutation p": p_text(p), "verdict": budget_verdict(rho, p),
                     f"swapped ({labels[0]}'s order first)": ", ".join(f"{u} > {v}" for u, v in
                                                                       swapped_pairs(layers, x, y)) or "none"})
    if not rows:
        return []
    scores = "the row scores" if both else f"the rows' {VAL}"
    return [f"## does the ranking hold from {labels[0]} to {labels[-1]}? (Spearman's rho of {scores}; "
            f"one-sided exact permutation p; holds: rho > 0 and p < {ALPHA:g})", "", markdown_table(pd.DataFrame(rows)),
            ""]


def compare_regimes(reads: Sequence[FolderRead]) -> list[str]:
    """The comparison as markdown lines."""
    if len(reads) < 2:
        raise NormbenchError("compare needs at least two output folders (one grid at different budgets, widths or "
                             "optimizers, or different rows of one recipe)")
    if len({r.path.resolve() for r in reads}) < len(reads):
        raise NormbenchError("compare got the same folder twice: pass folders of one grid at different budgets, "
                             "widths or optimizers, or folders holding different rows of one recipe")
    factors = differing(reads)
    if factors:
        several = ["epochs"] * (len({epochs_of(r) for r in reads}) > 1) + factors
        if len(several) > 1:
            raise NormbenchError(f"these folders differ in {' and '.join(several)}; compare folders that differ in "
                                 "one of them")
        return compare_sides(reads, factors[0])
    if len({budget_of(r) for r in reads}) == 1:  # one budget, width, optimizer: different rows of one regime?
        if (why := union_refusal(reads)) is not None:
            raise NormbenchError(why)
        return compare_rows(reads, "normbench compare " + " ".join(shown_path(r.path) for r in reads),
                            claims_rows(reads, axis="folder", regime_of=lambda r: folder_name(r, reads)))
    reads = ordered(reads)
    names = " vs ".join(label(r) for r in reads)
    lines = [f"# normbench regimes: {names}", "",
             "The same grid trained at different budgets, each folder under its own protocol (its selection seeds "
             "choose each row's lr on val; its report seeds score it on test). Scores: test top-1 %, mean over "
             f"the report seeds [95% t interval], {DIGITS} decimal, rounded once from the full-precision mean; bold: "
             "the column's true maximum. Regenerate with `normbench compare "
             + " ".join(shown_path(r.path) for r in reads) + "`.", "",
             markdown_table(runs_table(reads)), ""]
    depths = sorted(set.intersection(*(set(r.analysis.selected["depth"]) for r in reads)))
    for depth in depths:
        lines += [f"## depth {depth}: final accuracy in each regime (rank 1 = best)", "",
                  markdown_table(depth_table(reads, depth)), ""]
    agreement = budget_agreement(combined_selected(reads), ["depth"])
    if not agreement.empty:
        lines += ["## does the ranking hold across budgets? (Spearman's rho of the layer scores against the "
                  f"largest budget's; one-sided exact permutation p; holds: rho > 0 and p < {ALPHA:g})", "",
                  markdown_table(budget_table(agreement, ["depth"])), ""]
    baseline = baseline_table(reads)
    if not baseline.empty:
        lines += [f"## against {reads[-1].suite.baseline or 'layernorm'} in each regime (paired over matched report "
                  "seeds, each layer at its own val-selected lr; Holm over each folder's table, as its leaderboard; "
                  f"a reading is better/worse only where the adjusted p < {ALPHA:g})", "",
                  markdown_table(baseline), ""]
    claims = claims_rows(reads)
    if not claims.empty:
        lines += ["## claims in each regime (paired t test against `by`, Holm over each folder's claims)", "",
                  markdown_table(claims), ""]
    labels = [label(r) for r in reads]
    return lines + interaction_lines(reads, labels) + logit_lines(reads, labels)
