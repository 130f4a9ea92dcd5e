"""The leaderboard's tables as text: what a row says when its numbers cannot be computed yet."""

from __future__ import annotations

import pandas as pd

from normbench.contracts.selection import add_scores
from normbench.report.stats import select_lr
from normbench.report.tables import baseline_table
from tests.report.test_stats import cell, paired_cells


def test_a_row_scored_on_other_seeds_than_the_baseline_reads_no_matched_seeds_not_nan():
    # mid-sweep: layernorm and learnable_scaler are scored on seeds 0-2, rezero's seeds 100-101 pair with none
    cells = pd.concat([paired_cells([2.0, 5.0, 2.0]), add_scores(pd.DataFrame(
        [cell("rezero", 1e-3, seed, 70.0, 80.0, depth=36) for seed in (100, 101)]))], ignore_index=True)
    table = baseline_table(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], "layernorm")
    rows = table.set_index("layer")
    assert rows.loc["rezero", "minus layernorm (points)"] == "—"
    assert rows.loc["rezero", "reading"] == "no matched seeds" and rows.loc["rezero", "n (paired seeds)"] == "0"
    assert rows.loc["learnable_scaler", "minus layernorm (points)"] == "+3.00"
    assert rows.loc["learnable_scaler", "reading"] == "no clear difference"
    assert "nan" not in table.to_string()
