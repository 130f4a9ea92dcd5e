"""Is the ranking an answer about the layers or about the budget? With `epochs` as a matrix axis, each budget's
layer ranking (per depth) is compared with the largest budget's: Spearman's rho, its permutation p, and the pairs
of layers that swap. Pure.
"""

from __future__ import annotations

import math

import pandas as pd

from normbench.report.rank_agreement import permutation_p, spearman, swapped_pairs
from normbench.report.stats import ALPHA

BUDGET_AXIS = "epochs"
MIN_LAYERS = 3  # two layers give rho = ±1 whatever the evidence


def budget_verdict(rho: float, p: float) -> str:
    if math.isnan(rho):
        return "—"
    return "holds" if rho > 0 and p < ALPHA else "not settled"


def budget_agreement(selected: pd.DataFrame, group_keys: list[str]) -> pd.DataFrame:
    """Per group (e.g. depth) and budget below the largest: rho and p of the layer scores against the largest
    budget's, the layers both have, and the swapped pairs (this budget's order first). Empty without two budgets."""
    rows = []
    groups = selected.groupby(group_keys, dropna=False, sort=True) if group_keys else [((), selected)]
    for key, group in groups:
        where = dict(zip(group_keys, key if isinstance(key, tuple) else (key,), strict=True))
        budgets = sorted(group[BUDGET_AXIS].unique())
        if len(budgets) < 2:
            continue
        final = group[group[BUDGET_AXIS] == budgets[-1]].set_index("layer")["mean"]
        for budget in budgets[:-1]:
            here = group[group[BUDGET_AXIS] == budget].set_index("layer")["mean"]
            layers = sorted(set(here.index) & set(final.index))
            a, b = here[layers].to_numpy(float), final[layers].to_numpy(float)
            enough = len(layers) >= MIN_LAYERS
            rho = spearman(a, b) if enough else math.nan
            p = permutation_p(a, b) if enough else math.nan
            rows.append({**where, "budget": budget, "against": budgets[-1], "layers": len(layers), "rho": rho,
                         "p": p, "verdict": budget_verdict(rho, p), "swaps": swapped_pairs(layers, a, b)})
    return pd.DataFrame(rows)


def check_agreement(checked: pd.DataFrame, row_keys: list[str], table_keys: list[str]) -> pd.DataFrame:
    """Per table of the 2x convergence check (convergence.budget_rows): rho and permutation p of the rows' val at
    1x against 2x, and the pairs that swap. Formatted: one text column each."""
    rows = []
    checked = checked[checked["val_2x"].notna()]  # a row whose 2x cells ran on another device compares nothing
    groups = checked.groupby(table_keys, dropna=False, sort=True) if table_keys else [((), checked)]
    for key, group in groups:
        where = dict(zip(table_keys, key if isinstance(key, tuple) else (key,), strict=True))
        names = [" ".join(str(r[k]) for k in row_keys) for r in group.to_dict("records")]
        a, b = group["val_1x"].to_numpy(float), group["val_2x"].to_numpy(float)
        enough = len(group) >= MIN_LAYERS
        rho = spearman(a, b) if enough else math.nan
        p = permutation_p(a, b) if enough else math.nan
        rows.append({**{k: str(v) for k, v in where.items()}, "rows": str(len(group)),
                     "rho": "—" if math.isnan(rho) else f"{rho:+.2f}",
                     "permutation p": "—" if math.isnan(p) else f"{p:.3f}", "verdict": budget_verdict(rho, p),
                     "swapped (order at 1x)": ", ".join(f"{x} > {y}" for x, y in swapped_pairs(names, a, b)) or "none"})
    return pd.DataFrame(rows)
