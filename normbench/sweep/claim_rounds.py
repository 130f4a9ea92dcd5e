"""The claim rounds: once the report seeds have trained, each claim still open (report/claims.py) asks for the next
round of report seeds for both of its rows, at their chosen lrs, until it decides or reaches the suite's cap
(contracts/claim_rounds.py). Pure: cells in, axes out; sweep/run.py queues them into `claims:<suite>`."""

from __future__ import annotations

from typing import Any

import pandas as pd

from normbench.contracts.selection import BUDGETS, ROLE
from normbench.contracts.suite import Suite, claim_rival
from normbench.report.analysis import table_and_row_keys
from normbench.report.claims import check_claims, open_claims
from normbench.report.stats import reporting, select_lr


def claim_round_axes(suite: Suite, cells: pd.DataFrame) -> list[dict[str, Any]]:
    """The axes of the next round's cells: for each open claim's two rows, the round's seeds at each row's chosen lr
    (matrix key order, then `seed`), each cell once; [] when no claim is open or the cells cannot be read yet."""
    if cells.empty or not suite.claims or not suite.report_seeds:
        return []
    cells = cells[cells[ROLE] != BUDGETS]  # the 2x cells never choose nor score
    row_keys, table_keys = table_and_row_keys(cells, list(suite.matrix))
    keys = [*row_keys, *table_keys]
    selected = select_lr(cells, keys)
    claims = check_claims(cells, selected, keys, suite.claims, suite.sequential, len(suite.report_seeds))
    seeds = suite.claim_seeds()
    reported = reporting(cells, keys)
    axes: dict[str, dict[str, Any]] = {}
    for _, claim in open_claims(claims).iterrows():
        for layer in (claim["layer"], claim_rival(claim)[1]):
            where = {k: claim[k] for k in keys if k != "layer"} | {"layer": layer}
            row = selected[(selected[list(where)] == pd.Series(where)).all(axis=1)]
            if row.empty:
                continue
            at = where | {"lr": row["lr"].iloc[0]}  # a seed trained at another lr (before selection moved) is not had
            have = set(reported[(reported[list(at)] == pd.Series(at)).all(axis=1)]["seed"])
            for seed in _next_round(seeds, have, len(suite.report_seeds)):
                values = {**where, "lr": float(row["lr"].iloc[0]), "seed": seed}
                ordered = {k: values[k] for k in suite.matrix if k in values}
                ordered.update({k: v for k, v in values.items() if k not in ordered and k in ("lr", "seed")})
                axes[suite.cell(ordered).cell_id] = ordered
    return list(axes.values())


def _next_round(seeds: list[int], have: set[int], size: int) -> list[int]:
    """The next `size` seeds of `seeds` (in order) this row lacks."""
    return [s for s in seeds if s not in have][:size]
