"""The leaderboard's tables as text: what a row says when its numbers cannot be computed yet."""

from __future__ import annotations

import math

import pandas as pd

from normbench.contracts.selection import add_scores
from normbench.report.claims import check_claims
from normbench.report.stats import select_lr
from normbench.report.tables import baseline_table, claims_table, detectable_text
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


def test_a_comparison_that_fell_back_to_the_selection_seeds_says_so():
    # mid-sweep: "a" has report seeds, its baseline "b" not yet: they pair on selection seeds 0 and 1, and say so
    select = [cell(name, 1e-3, seed, val, val) for name, vals in (("a", (80.0, 84.0)), ("b", (70.0, 72.0)))
              for seed, val in zip((0, 1), vals, strict=True)]
    rows = [{**c, "role": "select"} for c in select] + [{**cell("a", 1e-3, s, 99.0, 99.0), "role": "report"}
                                                        for s in (100, 101)]
    cells = add_scores(pd.DataFrame(rows))
    selected = select_lr(cells, ["layer", "depth"])
    table = baseline_table(cells, selected, ["layer", "depth"], "b").set_index("layer")
    assert table.loc["a", "n (paired seeds)"] == "2 (selection seeds)"
    assert table.loc["a", "minus b (points)"] == "+11.00"
    claims = check_claims(cells, selected, ["layer", "depth"], [{"layer": "a", "beats": "b", "depth": 12}])
    assert claims_table(claims).iloc[0]["n (paired seeds)"] == "2 (selection seeds)"


def test_a_claims_detectable_effect_says_why_there_is_none_and_what_the_source_claimed():
    assert detectable_text(9.8712, 0.0125, 4, 0.3) == "9.87 at α 0.0125 (source: 0.30)"
    assert detectable_text(9.8712, 0.05, 4, math.nan) == "9.87 at α 0.05 (source: none)"
    assert detectable_text(math.nan, math.nan, 1, 0.3) == "— (one pair; source: 0.30)"
    assert detectable_text(math.nan, math.nan, 0, math.nan) == "— (no pairs; source: none)"
    assert detectable_text(math.nan, 0.05, 3, 1.0) == "— (no spread; source: 1.00)"


def test_the_claims_table_puts_the_detectable_effect_before_the_verdict():
    cells = paired_cells([2.0, 5.0, 2.0])  # sd sqrt(3): 3 pairs at 0.05 detect 3.264 * sqrt(3) = 5.65 points
    claims = check_claims(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"],
                          [{"layer": "learnable_scaler", "beats": "layernorm", "depth": 36, "by": 0.0,
                            "claimed": 3.4}])
    table = claims_table(claims)
    columns = table.columns.tolist()
    assert columns.index("detectable at 80% power (points)") == columns.index("verdict") - 1
    row = table.iloc[0]
    assert row["detectable at 80% power (points)"] == "5.65 at α 0.05 (source: 3.40)"
    assert row["verdict"] == "underpowered"  # 5.65 > 3.4: these seeds could not have seen the source's gain
