"""Markdown tables of the leaderboard: format what normbench.report.stats computes, nothing more."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from normbench.contracts.selection import AT_CHANCE, FLAT, add_scores
from normbench.contracts.suite import claim_rival
from normbench.report.convergence import NOT_COMPARABLE
from normbench.report.learning_speed import NEVER
from normbench.report.stats import ACCURACY, Verdicts, fell_back, reading, t_interval, versus_baseline
from normbench.report.style import lr_text, window_text

BEST = "★"
BASELINE_VERDICTS = Verdicts("better", "worse", "no clear difference", "no CI (one seed)")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub markdown table of `frame`, no index; every committed report's tables (leaderboard, bench)."""
    from tabulate import tabulate

    # cells are preformatted text: without disable_numparse, tabulate would turn "65.00" back into "65"
    return tabulate(frame, headers="keys", tablefmt="github", showindex=False, disable_numparse=True)


def ci_text(low: float, high: float) -> str:
    """'[68.29, 93.71]', or '—' when there is no interval (one seed)."""
    return "—" if math.isnan(low) or math.isnan(high) else f"[{low:.2f}, {high:.2f}]"


def edge_text(edge: str, signal: str = "", why: str = "") -> str:
    """Where the selected lr sits and why bracketing left it there (report.analysis.with_edge_reasons: cap reached,
    an lr bound, bracketing off, unfinished); a row whose lrs tell nothing apart says so (contracts.selection.lr_signal)
    and how far both ways its lrs were explored (bracketing v3 takes such a row to the lr bounds)."""
    where = {"low": "edge (lowest lr", "high": "edge (highest lr", "only": "edge (one lr", "": ""}[edge]
    label = {AT_CHANCE: "no signal (best lr at chance)",
             FLAT: "no signal across lrs (flat within the seeds' spread)"}.get(signal, "")
    own = not label or why == "bracketing off"  # else the reason is the no-signal row's, said after the label
    if where:
        where = f"{where}{f', {why}' if why and own else ''})"
    stop = "" if own or not why else "bracketing unfinished" if why == "unfinished" else f"explored to the {why}"
    return "; ".join(t for t in (label, where, stop) if t)


def converged_text(row: pd.Series) -> str:
    """'yes (2x: +0.4)' / 'still improving (+2.4 at 2x)' where the 2x check ran, else the loss/val-slope rule's
    'no (reason)', or its 'yes' marked unconfirmed: where both ran at 640 steps, the 2x check found 32 of the 35 rows
    the rule called converged still improving by 1.1-6.5 points (docs/protocol.md)."""
    if "converged" not in row or row["converged"] != row["converged"]:
        reason = row.get("reason")  # the 2x check's cells ran on another device than the 1x cells: nothing checked
        return str(reason) if isinstance(reason, str) and reason.startswith(NOT_COMPARABLE) else "?"
    change = row.get("change")
    if change is not None and change == change:
        return f"yes (2x: {change:+.1f})" if row["converged"] else str(row["reason"])
    return "yes by the final-loss rule (unconfirmed: no 2x check)" if row["converged"] else f"no ({row['reason']})"


def rank_text(i: int, rows: int, separated: bool | None) -> str:
    """'1 ★' for a top row separated from the second (Holm-adjusted paired p < 0.05), '1 (tied)' otherwise."""
    if i > 0 or rows < 2:
        return str(i + 1)
    return f"1 {BEST}" if separated else "1 (tied)"


def _text(value: Any, digits: int = 2) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def layer_table(selected: pd.DataFrame, row_keys: list[str], params: dict[Any, float] | None = None,
                separated: bool | None = None) -> pd.DataFrame:
    """Per row of `select_lr`'s output (with analysis' convergence and sensitivity columns when present): rank,
    score with CI and n, the score among the seeds that did not diverge, the val-selected lr, edge or no-signal
    flag, convergence, lr window, lr sensitivity, failure rate. Sorted by score; ★ marks a separated top row."""
    table = selected.sort_values("mean", ascending=False, kind="stable").reset_index(drop=True)
    rows = []
    for i, r in table.iterrows():
        key = tuple(r[k] for k in row_keys)
        rows.append({"rank": rank_text(int(i), len(table), separated),
                     **{k: r[k] for k in row_keys},
                     "test top-1 (%)": _text(r["mean"]), "95% CI": ci_text(r["low"], r["high"]),
                     "n": f"{r['n']} {r.get('seeds', '')}".strip(),
                     "non-failing (%)": f"{_text(r.get('ok_mean'))} ({r.get('ok_n', r['n'])})",
                     "val top-1 (%)": f"{r['select_mean']:.2f}", "lr (val-selected)": lr_text(r["lr"]),
                     "edge": edge_text(r["edge"], r.get("signal", ""), r.get("edge_why", "") or ""),
                     "converged": converged_text(r),
                     "lr window": window_text(r["window_low"], r["window_high"]),
                     "lr sensitivity (points)": _text(r.get("sensitivity")),
                     "failed": f"{r['diverged']}/{r['cells']} ({100 * r['diverged'] / max(1, r['cells']):.0f}%)",
                     **({"devices": r["devices"]} if "devices" in r else {}),
                     **({"params (M)": f"{params[key] / 1e6:.3f}"} if params and key in params else {})})
    return pd.DataFrame(rows)


def steps_text(median: float, reached: int, n: int) -> str:
    """'96 (4/4)', or 'never (1/4)' when the median seed did not reach the target."""
    if median != median:
        return "—"
    return f"{'never' if median == NEVER else f'{median:.0f}'} ({reached}/{n})"


def speed_table(speed: pd.DataFrame, row_keys: list[str], targets: list[float]) -> pd.DataFrame:
    """Per row: median optimizer steps to each val target over the reporting seeds (how many reached it). Sorted by
    the highest target first (never = slowest), then the lower ones."""
    order = [f"median_{t:g}" for t in sorted(targets, reverse=True)]
    table = speed.sort_values(order, kind="stable")
    return pd.DataFrame([{**{k: r[k] for k in row_keys},
                          **{f"steps to {t:g}% val": steps_text(r[f"median_{t:g}"], r[f"reached_{t:g}"], r["n"])
                             for t in targets}}
                         for _, r in table.iterrows()])


def all_depths_table(selected: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """Rows x depths of 'score [CI]' (edge-selected entries marked 'e'), sorted by the mean score over depths."""
    depths = sorted(selected["depth"].unique())
    rows = []
    for key, group in selected.groupby(row_keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(row_keys, key, strict=True))
        by_depth = group.set_index("depth")
        for d in depths:
            if d in by_depth.index:
                r = by_depth.loc[d]
                mark = " e" if r["edge"] else ""
                row[f"depth {d}"] = f"{r['mean']:.2f} {ci_text(r['low'], r['high'])}{mark}"
            else:
                row[f"depth {d}"] = ""
        row["_order"] = group["mean"].mean()
        rows.append(row)
    table = pd.DataFrame(rows).sort_values("_order", ascending=False, kind="stable")
    return table.drop(columns="_order")


def p_text(p: float) -> str:
    return "—" if p != p else "<0.001" if p < 0.001 else f"{p:.3f}"


def baseline_table(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], baseline: str) -> pd.DataFrame:
    """Every layer minus the baseline, per depth, paired over matched seeds at each one's val-selected lr, with the
    paired t p and its Holm adjustment over the whole table; the reading follows the adjusted p."""
    diffs = versus_baseline(cells, selected, keys, baseline)
    if diffs.empty:
        return diffs
    group_keys = [k for k in keys if k != "layer"]
    diffs = diffs.sort_values([*group_keys, "mean"], ascending=[True] * len(group_keys) + [False], kind="stable")
    rows = []
    for _, r in diffs.iterrows():
        matched = r["n"] > 0  # none: no seed trained both rows at their chosen lrs (failed, or not trained yet)
        rows.append({**{k: r[k] for k in group_keys}, "layer": r["layer"],
                     f"minus {baseline} (points)": f"{r['mean']:+.2f}" if matched else "—",
                     "95% CI": ci_text(r["low"], r["high"]), "n (paired seeds)": paired_text(r), "p": p_text(r["p"]),
                     "p (Holm)": p_text(r["p_holm"]),
                     "reading": reading(r["mean"], r["p_holm"], BASELINE_VERDICTS) if matched else "no matched seeds"})
    return pd.DataFrame(rows)


def paired_text(row: Any) -> str:
    """The paired seeds' count, which seeds they are where the comparison fell back to the selection seeds (one
    row has its report seeds, the other not yet: stats.paired_difference), and the seeds left out because their two
    cells trained on different devices (or, for a steadiness claim, kept though their cells span devices)."""
    notes = ["selection seeds"] if fell_back(row) else []
    cross = row.get("cross_device")
    if cross == cross and cross:
        mixed = row.get("mixed_devices")
        notes.append(f"{int(cross)} span CPU and GPU" if mixed == mixed and mixed
                     else f"{int(cross)} left out: CPU vs GPU")
    return f"{row['n']} ({'; '.join(notes)})" if notes else str(row["n"])


def effect_text(mean: float, low: float, high: float, claimed: float | None) -> str:
    """The measured effect against the source's: '+20.50 against a claimed +3.40: a different regime' when the
    claimed gain lies outside the interval, '... : consistent' inside it."""
    if claimed is None or claimed != claimed or mean != mean:
        return ""
    inside = not (math.isnan(low) or math.isnan(high)) and low <= claimed <= high
    return f"{mean:+.2f} against a claimed {claimed:+.2f}: {'consistent' if inside else 'a different regime'}"


def claim_text(claim: Any) -> str:
    """'A beats B at depth D [by more than x]', or for a `steadier_than` claim what its difference measures."""
    kind, rival = claim_rival(claim)
    by = f" by more than {claim['by']:g}" if claim["by"] else ""
    if kind == "beats":
        return f"{claim['layer']} beats {rival} at depth {claim['depth']}{by}"
    return (f"{claim['layer']}'s lr sensitivity is below {rival}'s at depth {claim['depth']}{by} (theirs minus its, "
            "per selection seed, over the lrs both tried)")


def detectable_text(detectable: float, alpha: float, n: int, reference: float) -> str:
    """The claim's detectable effect at the level its look was judged at (a single look's: its Holm level) against the
    source's: '9.87 at α 0.005 (source: 0.30)';
    '— (one pair)' / '— (no spread)' where there is none, '(source: none)' where no reference is comparable."""
    source = f"source: {reference:.2f}" if reference == reference else "source: none"
    if detectable != detectable:
        why = "no pairs" if n == 0 else "one pair" if n == 1 else "no spread"
        return f"— ({why}; {source})"
    return f"{detectable:.2f} at α {alpha:.3g} ({source})"


def claims_table(claims: pd.DataFrame, regimes: list[str] | None = None) -> pd.DataFrame:
    """One line per claim (report/claims.py): the paired difference, its interval, the seeds and looks it was read
    on, the difference test's Holm-adjusted repeated p and the nominal level its last look had to beat, the no-effect
    test (TOST at the margin), the effect the test could detect at 80% power beside the source's, the verdict, the
    effect against the claimed one, and (`regimes`, one per claim row) the regime it was read in."""
    rows = []
    for i, (_, c) in enumerate(claims.iterrows()):
        claimed = c.get("claimed")
        claimed = claimed if claimed is not None and claimed == claimed else (c["by"] or None)
        rows.append({"claim": claim_text(c),
                     "difference (points)": "—" if math.isnan(c["mean"]) else f"{c['mean']:+.2f}",
                     "95% CI": ci_text(c["low"], c["high"]), "n (paired seeds)": looks_text(c),
                     "p (sequential, Holm)": p_text(c["p_holm"]),
                     "look's level": "—" if c["boundary"] != c["boundary"] else f"{c['boundary']:.3g}",
                     "no effect (TOST, Holm)": no_effect_text(c["margin"], c["p_equiv_holm"]),
                     "detectable at 80% power (points)": detectable_text(c["detectable"], c["detectable_level"], c["n"],
                                                                          c["reference"]),
                     "verdict": c["verdict"],
                     "effect vs claimed": effect_text(c["mean"], c["low"], c["high"], claimed),
                     **({"regime": regimes[i]} if regimes is not None else {})})
    return pd.DataFrame(rows)


def looks_text(claim: Any) -> str:
    """The paired seeds, and for a sequential claim the looks it had ('8 (looks at 4, 8)'; report/claims.py)."""
    looks = claim.get("looks")
    if not claim.get("sequential") or not isinstance(looks, list) or len(looks) < 2:
        return paired_text(claim)
    return f"{claim['n']} (looks at {', '.join(map(str, looks))})"


def no_effect_text(margin: float, p_holm: float) -> str:
    """'±0.30: p 0.812' (TOST within the margin, Holm-adjusted), '— (no margin)' where neither the source nor the
    suite gives one."""
    if margin != margin:
        return "— (no margin)"
    return f"±{margin:.2f}: p {p_text(p_holm)}"


def lr_depth_table(selected: pd.DataFrame, tried: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """Rows x depths of 'selected lr (lrs tried: low–high)'; `tried` is the selection cells' min/max lr per row and
    depth. The question a user tuning a deeper model asks first: does the best lr move with depth?"""
    rows = []
    for key, group in selected.groupby(row_keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = {k: str(v) for k, v in zip(row_keys, key, strict=True)}
        for r in group.sort_values("depth").to_dict("records"):
            low, high = tried.loc[(*key, r["depth"])]
            edge = " e" if r["edge"] in ("low", "high") else ""
            row[f"depth {r['depth']:g}"] = f"{lr_text(r['lr'])}{edge} ({lr_text(low)}–{lr_text(high)})"
        rows.append(row)
    return pd.DataFrame(rows)


def budget_check_table(checked: pd.DataFrame, row_keys: list[str], table_keys: list[str]) -> pd.DataFrame:
    """The 2x convergence check per row: val at 1x and 2x on the same seeds, the change, the verdict."""
    table = checked.sort_values([*table_keys, "val_1x"], ascending=[True] * len(table_keys) + [False], kind="stable")
    return pd.DataFrame([{**{k: str(r[k]) for k in [*table_keys, *row_keys]}, "seeds": str(r["seeds"]),
                          "val 1x": _points(r["val_1x"]), "val 2x": _points(r["val_2x"]),
                          "change": _points(r["change"], "+"),
                          "verdict": "converged" if r["converged"] == r["converged"] and r["converged"]
                          else r["reason"]}
                         for _, r in table.iterrows()])


def _points(value: float, sign: str = "") -> str:
    """'84.44' ('+8.33' with sign '+'); '—' where the check compared nothing (its cells on another device)."""
    return "—" if value != value else f"{value:{sign}.2f}"


def budget_table(agreement: pd.DataFrame, group_keys: list[str]) -> pd.DataFrame:
    """Each budget's ranking against the largest budget's: rho, permutation p, verdict, the swapped pairs."""
    return pd.DataFrame([{**{k: str(r[k]) for k in group_keys}, "epochs": f"{r['budget']} vs {r['against']}",
                          "layers": str(r["layers"]), "rho": "—" if math.isnan(r["rho"]) else f"{r['rho']:+.2f}",
                          "permutation p": p_text(r["p"]), "verdict": r["verdict"],
                          "swapped (order at the smaller budget)":
                              ", ".join(f"{a} > {b}" for a, b in r["swaps"]) or "none"}
                         for _, r in agreement.iterrows()])


def tuned_table(tuned: pd.DataFrame, suite: Any = None,
                grid_lrs: dict[tuple[str, int], float] | None = None,
                grid_notes: dict[tuple[str, int], str] | None = None) -> pd.DataFrame:
    """The tuned configs re-run over seeds: test score with CI and n, the winning configuration, and (with the
    `suite`) how far each tuned value moved from what the grid's recipe trains (contracts/tuning.py
    `recipe_value`): a ratio for positive values (an lr or an init lives on a log scale), else the difference.
    The lr is measured against the lr the grid selected for the row where `grid_lrs` ((layer, depth) -> lr) has
    one: a grid shares no single lr, so the recipe's `train.lr` would measure the distance from an lr no row
    chose; `grid_notes` says where a row's grid lr came from when not the first grid (" (vs FOLDER)"). Sorted by
    score."""
    from normbench.contracts.layer_tunables import distance_text
    from normbench.contracts.tuning import recipe_value

    tuned = add_scores(tuned)
    keys = [c for c in ("layer", "depth") if c in tuned]
    rows = []
    for key, group in tuned.groupby(keys, sort=True):
        where = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        config = group.iloc[0].get("tuned_params", {}) or {}
        mean, low, high = t_interval(group["score"], bounds=ACCURACY)
        moved = {}
        if suite is not None:
            cell = suite.cell({k: v for k, v in where.items() if k in ("layer", "depth")})
            chosen = (grid_lrs or {}).get((where.get("layer"), where.get("depth")))
            moved = {k: distance_text(v, chosen if k == "lr" and chosen is not None else recipe_value(cell, k))
                     for k, v in config.items()}
            if grid_lrs is not None and chosen is None and "lr" in moved:  # the grid lacks this row
                moved["lr"] += " (vs train.lr: not in the grid)"
            elif "lr" in moved and (where.get("layer"), where.get("depth")) in (grid_notes or {}):
                moved["lr"] += f" ({(grid_notes or {})[(where.get('layer'), where.get('depth'))]})"
        rows.append({**where, "_mean": mean,
                     "test top-1 (%)": f"{mean:.2f}", "95% CI": ci_text(low, high), "n": str(len(group)),
                     "val top-1 (%)": f"{group['select'].mean():.2f}",
                     "diverged": f"{int((group['status'] == 'diverged').sum())}/{len(group)}",
                     "best config (val)": ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in config.items()),
                     **({"moved from the grid's recipe": ", ".join(f"{k} {d}" for k, d in moved.items())}
                        if suite is not None else {})})
    # sort on the number: as text "9.5" > "85.1"
    return pd.DataFrame(rows).sort_values("_mean", ascending=False, kind="stable").drop(columns="_mean")


def throughput_table(cells: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """Median training images/s over each row's cells, rows x depths; x devices too when the cells name several (a
    GPU cell's speed says nothing of a CPU cell's: never pooled; cells that name none are "?" there); and fused
    cells (trained K at a time as one model, `fused_group` > 1: each at the rate its group trained) apart from
    unfused ones, when the folder has any."""
    devices = cells["device"].fillna("").astype(str) if "device" in cells else pd.Series("", index=cells.index)
    fused = (pd.to_numeric(cells["fused_group"], errors="coerce").fillna(1) > 1 if "fused_group" in cells
             else pd.Series(False, index=cells.index))
    columns = ["depth", "_device"] if devices[devices != ""].nunique() > 1 else ["depth"]
    columns += ["_fused"] if fused.any() else []
    devices = devices.replace("", "?")
    pivot = cells.assign(_device=devices, _fused=fused.map({True: "fused", False: "unfused"})).pivot_table(
        index=row_keys, columns=columns, values="images_per_sec", aggfunc="median")
    pivot.columns = [", ".join([f"depth {c[0]}", *map(str, c[1:])]) if isinstance(c, tuple) else f"depth {c}"
                     for c in pivot.columns]
    return pivot.map(lambda v: "" if pd.isna(v) else f"{v:.0f}").reset_index()


def transfer_table(summary: pd.DataFrame) -> pd.DataFrame:
    """transfer.ranking_transfer's summary: depth, layers, rho, 95% interval, verdict."""
    return pd.DataFrame([{"depth": str(r["depth"]) if r["depth"] != "all" else "all (mean of depths)",
                          "layers": str(r["layers"]), "rho": "—" if math.isnan(r["rho"]) else f"{r['rho']:+.2f}",
                          "permutation p": p_text(r.get("p", math.nan)),
                          "95% interval": ci_text(r["low"], r["high"]), "verdict": r["verdict"]}
                         for _, r in summary.iterrows()])


def rankings_table(rankings: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Both rankings of one depth side by side, in this suite's order."""
    rows = rankings.sort_values(["rank_here", "layer"], kind="stable")
    return pd.DataFrame([{"layer": r["layer"], "score here (%)": f"{r['score_here']:.2f}",
                          f"score in {reference} (%)": f"{r['score_there']:.2f}",
                          "rank here": f"{r['rank_here']:g}", f"rank in {reference}": f"{r['rank_there']:g}"}
                         for _, r in rows.iterrows()])
