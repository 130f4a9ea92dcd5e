"""Markdown tables of the leaderboard: format what normbench.report.stats computes, nothing more."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from normbench.report.stats import Verdicts, t_interval, verdict, versus_baseline
from normbench.spec.selection import add_scores

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


def window_text(low: float, high: float) -> str:
    """The lr window as 'low–high (xN)', N its geometric span; a single lr reads '0.003 (x1)'."""
    return f"{low:g} (x1)" if low == high else f"{low:g}–{high:g} (x{high / low:.3g})"


def edge_text(edge: str) -> str:
    return {"low": "edge (lowest lr)", "high": "edge (highest lr)", "only": "edge (one lr)", "": ""}[edge]


def layer_table(selected: pd.DataFrame, row_keys: list[str], params: dict[Any, float] | None = None) -> pd.DataFrame:
    """Per row of `select_lr`'s output: rank, score with CI and n, the val-selected lr, edge flag, lr window,
    divergences. Sorted by score; the best row is marked."""
    table = selected.sort_values("mean", ascending=False, kind="stable").reset_index(drop=True)
    rows = []
    for i, r in table.iterrows():
        key = tuple(r[k] for k in row_keys)
        rows.append({"rank": f"{i + 1} {BEST}" if i == 0 else str(i + 1),
                     **{k: r[k] for k in row_keys},
                     "test top-1 (%)": f"{r['mean']:.2f}", "95% CI": ci_text(r["low"], r["high"]), "n": str(r["n"]),
                     "val top-1 (%)": f"{r['select_mean']:.2f}", "lr (val-selected)": f"{r['lr']:g}",
                     "edge": edge_text(r["edge"]), "lr window": window_text(r["window_low"], r["window_high"]),
                     "diverged": f"{r['diverged']}/{r['cells']}",
                     **({"params (M)": f"{params[key] / 1e6:.3f}"} if params and key in params else {})})
    return pd.DataFrame(rows)


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


def baseline_table(cells: pd.DataFrame, selected: pd.DataFrame, keys: list[str], baseline: str) -> pd.DataFrame:
    """Every layer minus the baseline, per depth, paired over matched seeds at each one's val-selected lr."""
    diffs = versus_baseline(cells, selected, keys, baseline)
    if diffs.empty:
        return diffs
    group_keys = [k for k in keys if k != "layer"]
    diffs = diffs.sort_values([*group_keys, "mean"], ascending=[True] * len(group_keys) + [False], kind="stable")
    rows = []
    for _, r in diffs.iterrows():
        rows.append({**{k: r[k] for k in group_keys}, "layer": r["layer"],
                     f"minus {baseline} (points)": f"{r['mean']:+.2f}", "95% CI": ci_text(r["low"], r["high"]),
                     "n (paired seeds)": str(r["n"]), "reading": verdict(r["low"], r["high"], words=BASELINE_VERDICTS)})
    return pd.DataFrame(rows)


def claims_table(claims: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, c in claims.iterrows():
        by = f" by more than {c['by']:g}" if c["by"] else ""
        rows.append({"claim": f"{c['layer']} beats {c['beats']} at depth {c['depth']}{by}",
                     "difference (points)": "—" if math.isnan(c["mean"]) else f"{c['mean']:+.2f}",
                     "95% CI": ci_text(c["low"], c["high"]), "n (paired seeds)": str(c["n"]),
                     "verdict": c["verdict"]})
    return pd.DataFrame(rows)


def tuned_table(tuned: pd.DataFrame) -> pd.DataFrame:
    """The tuned configs re-run over seeds: test score with CI and n, sorted by score."""
    tuned = add_scores(tuned)
    keys = [c for c in ("layer", "depth") if c in tuned]
    rows = []
    for key, group in tuned.groupby(keys, sort=True):
        config = group.iloc[0].get("tuned_params", {})
        mean, low, high = t_interval(group["score"])
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)), "_mean": mean,
                     "test top-1 (%)": f"{mean:.2f}", "95% CI": ci_text(low, high), "n": str(len(group)),
                     "val top-1 (%)": f"{group['select'].mean():.2f}",
                     "diverged": f"{int((group['status'] == 'diverged').sum())}/{len(group)}",
                     "best config (val)": ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                    for k, v in (config or {}).items())})
    # sort on the number: as text "9.5" > "85.1"
    return pd.DataFrame(rows).sort_values("_mean", ascending=False, kind="stable").drop(columns="_mean")


def throughput_table(cells: pd.DataFrame, row_keys: list[str]) -> pd.DataFrame:
    """Median training images/s over each row's cells, rows x depths."""
    pivot = cells.pivot_table(index=row_keys, columns="depth", values="images_per_sec", aggfunc="median")
    pivot.columns = [f"depth {d}" for d in pivot.columns]
    return pivot.map(lambda v: "" if pd.isna(v) else f"{v:.0f}").reset_index()


def transfer_table(summary: pd.DataFrame) -> pd.DataFrame:
    """transfer.ranking_transfer's summary: depth, layers, rho, 95% interval, verdict."""
    return pd.DataFrame([{"depth": str(r["depth"]) if r["depth"] != "all" else "all (mean of depths)",
                          "layers": str(r["layers"]), "rho": "—" if math.isnan(r["rho"]) else f"{r['rho']:+.2f}",
                          "95% interval": ci_text(r["low"], r["high"]), "verdict": r["verdict"]}
                         for _, r in summary.iterrows()])


def rankings_table(rankings: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Both rankings of one depth side by side, in this suite's order."""
    rows = rankings.sort_values(["rank_here", "layer"], kind="stable")
    return pd.DataFrame([{"layer": r["layer"], "score here (%)": f"{r['score_here']:.2f}",
                          f"score in {reference} (%)": f"{r['score_there']:.2f}",
                          "rank here": f"{r['rank_here']:g}", f"rank in {reference}": f"{r['rank_there']:g}"}
                         for _, r in rows.iterrows()])
