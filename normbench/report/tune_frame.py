"""`normbench tune`'s cells read back like a run's, so that a folder `tune` alone wrote gets the same tables,
results.csv and figures: each search trial is a selection cell at the values it sampled (on the search seed), and
each re-run of a study's winner is a report cell at the values it re-ran (on the report seeds, which the search
never trained on). With confirmations (`tune.confirm_top`), a search's selection cells are its confirmed trials on
both search seeds, so the rule's seed mean is the confirmation's choice. The selection rule then picks the lr `tune`
picked (the best final-epoch val, ties to the smaller lr) and the re-runs alone score it.
"""

from __future__ import annotations

import pandas as pd

from normbench.contracts.names import StudyNames
from normbench.contracts.selection import ROLE, SELECTS, add_scores
from normbench.contracts.suite import Suite, cell_id
from normbench.report.frames import FINISHED
from normbench.store.ledger import Ledger


def with_tuned_values(tuned: pd.DataFrame) -> pd.DataFrame:
    """The tuned re-runs (a cells_frame with `tuned=True`) with each tuned value (`lr`, ...) as a column."""
    if tuned.empty:
        return tuned
    params = [p if isinstance(p, dict) else {} for p in tuned["tuned_params"]]
    for key in dict.fromkeys(k for p in params for k in p):
        tuned[key] = [p.get(key) for p in params]
    return tuned


def tune_cells(ledger: Ledger, names: StudyNames, suite: Suite, tuned: pd.DataFrame) -> pd.DataFrame:
    """The search trials (role select) and `tuned`, the re-runs (role report, from with_tuned_values), in one
    frame with scores."""
    from normbench.contracts.tuning import LABEL, SEARCH_TRIAL, recipe_axes, search_keys, search_point, search_seed

    present = set(ledger.study_names())
    confirmations = ledger.trials(ledger.study(names.confirm), FINISHED) if names.confirm in present else []
    confirmed = {(cell_id(search_point(t.user_attrs["axes"])), int(t.user_attrs["axes"][SEARCH_TRIAL]))
                 for t in confirmations}
    rows = []
    for key in search_keys(suite):
        name = names.tune(cell_id(key))
        if name not in present:
            continue
        for t in ledger.trials(ledger.study(name), FINISHED):
            if confirmations and (cell_id(key), t.number) not in confirmed:
                continue  # confirmed, a search chooses among its confirmed trials on both seeds (sweep/tune.py)
            rows.append({"cell_id": t.user_attrs.get(LABEL, f"{cell_id(key)},trial={t.number}"), **key,
                         "seed": search_seed(suite), **t.params, **t.user_attrs.get("result", {}), ROLE: SELECTS,
                         "trial": t.number, "bracket_round": 0, "history": t.user_attrs.get("history")})
    for t in confirmations:  # the best trials again on the confirmation seed: selection cells too
        rows.append({"cell_id": t.user_attrs.get("cell_id"), **recipe_axes(t.user_attrs["axes"]),
                     **t.user_attrs.get("overrides", {}), **t.user_attrs.get("result", {}), ROLE: SELECTS,
                     "trial": t.number, "bracket_round": 0, "history": t.user_attrs.get("history")})
    return add_scores(pd.concat([pd.DataFrame(rows), tuned], ignore_index=True))
