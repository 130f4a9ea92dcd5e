"""Width as a regime: each row's rank and gap to the baseline at two widths, on hand-built select_lr and
versus_baseline frames; an unfinished folder is named so and compared on its selection val means, never a verdict."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from normbench.errors import NormbenchError
from normbench.report.width import HOLDS, MOVES, NOISE, TEST, UNFINISHED, VAL, Side, finished, width_rows


def selected(scores: dict[str, tuple[float, float]], seeds: str = "report", column: str = "seeds") -> pd.DataFrame:
    """select_lr-shaped rows at depth 36: layer -> (test mean over its scoring seeds, selection val mean)."""
    return pd.DataFrame([{"layer": k, "depth": 36, "lr": 1e-3, "edge": "low" if k == "peri_ln" else "",
                          "mean": m, "select_mean": v, column: seeds}
                         for k, (m, v) in scores.items()])


def versus(readings: dict[str, tuple[float, float]]) -> pd.DataFrame:
    """versus_baseline-shaped rows: layer -> (mean difference, Holm p)."""
    return pd.DataFrame([{"depth": 36, "layer": k, "mean": m, "p_holm": p} for k, (m, p) in readings.items()])


NARROW = selected({"layernorm": (80.0, 70.0), "ngpt": (95.0, 90.0), "peri_ln": (50.0, 40.0),
                   "dyt": (78.0, 60.0), "rezero": (99.0, 99.0)})  # rezero: only narrow ran it
WIDE = selected({"layernorm": (85.0, 75.0), "ngpt": (97.0, 91.0), "peri_ln": (90.0, 88.0), "dyt": (84.0, 80.0)})


def by_layer(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_index("layer")


def test_finished_rows_read_each_folders_test_against_the_baseline():
    narrow = Side("width 64", NARROW, versus({"ngpt": (15.0, 0.001), "peri_ln": (-30.0, 0.01), "dyt": (-2.0, 0.5)}))
    wide = Side("width 192", WIDE, versus({"ngpt": (12.0, 0.002), "peri_ln": (5.0, 0.01), "dyt": (-1.0, 0.6)}))
    table, quantity = width_rows(narrow, wide, "layernorm")
    fading = Side("width 192", WIDE, versus({"ngpt": (12.0, 0.002), "peri_ln": (-3.0, 0.4), "dyt": (-1.0, 0.6)}))
    assert by_layer(width_rows(narrow, fading, "layernorm")[0]).loc["peri_ln", "across width"] == \
        "worse at width 64 only"  # decided at one width, within noise at the other: neither holds nor moves
    rows = by_layer(table)
    assert quantity == TEST
    assert "rezero" not in rows.index  # only rows both folders ran, ranked among themselves
    assert rows.loc["ngpt", "across width"] == HOLDS
    assert rows.loc["peri_ln", "across width"] == MOVES
    assert rows.loc["dyt", "across width"] == NOISE
    assert rows.loc["layernorm", "across width"] == "baseline"
    assert rows.loc["peri_ln", "width 64: rank"] == "4 of 4" and rows.loc["peri_ln", "width 192: rank"] == "2 of 4"
    assert rows.loc["peri_ln", "width 64: gap to layernorm"] == "-30.0 (worse)"
    assert rows.loc["peri_ln", "width 64: lr"] == "0.001 e" and rows.loc["ngpt", "width 64: lr"] == "0.001"
    assert rows.loc["peri_ln", "width 192: gap to layernorm"] == "+5.0 (better)"
    assert list(table["layer"]) == ["ngpt", "peri_ln", "layernorm", "dyt"]  # by rank at the wider width


def test_an_unfinished_folder_is_compared_on_selection_val_means_and_never_given_a_verdict():
    unfinished = selected({"layernorm": (85.0, 75.0), "ngpt": (97.0, 91.0), "peri_ln": (90.0, 88.0),
                           "dyt": (84.0, 80.0)}, seeds="select")
    narrow = Side("width 64", NARROW, versus({"ngpt": (15.0, 0.001), "peri_ln": (-30.0, 0.01), "dyt": (-2.0, 0.5)}))
    table, quantity = width_rows(narrow, Side("width 192", unfinished, pd.DataFrame()), "layernorm")
    rows = by_layer(table)
    assert quantity == VAL
    assert set(rows.drop("layernorm")["across width"]) == {UNFINISHED}
    assert rows.loc["peri_ln", "width 64: gap to layernorm"] == "-30.0"  # val means: 40 - 70, not test 50 - 80
    assert rows.loc["peri_ln", "width 192: gap to layernorm"] == "+13.0"


def test_finished_needs_report_seeds_on_every_row_in_either_column_name():
    assert finished(NARROW)
    assert finished(selected({"layernorm": (1.0, 1.0)}, column="seeds_x"))  # after analysis's 2x-check merge
    mixed = pd.concat([NARROW, selected({"ngpt": (1.0, 1.0)}, seeds="select")], ignore_index=True)
    assert not finished(mixed) and not finished(pd.DataFrame())


def fake_read(width: int, epochs: int, optimizer: str = "adamw", tuned: bool = False) -> SimpleNamespace:
    config = SimpleNamespace(model=SimpleNamespace(embed_dim=width),
                             train=SimpleNamespace(epochs=epochs, optimizer=optimizer))
    return SimpleNamespace(suite=SimpleNamespace(cell=lambda _: SimpleNamespace(config=config)), tuned=tuned,
                           path=Path(f"/folders/w{width}-e{epochs}-{optimizer}-{'tuned' if tuned else 'grid'}"))


def test_compare_refuses_folders_that_differ_in_more_than_one_thing():
    from normbench.report.regimes import compare_regimes

    with pytest.raises(NormbenchError, match="differ in epochs and width"):
        compare_regimes([fake_read(64, 40), fake_read(192, 80)])
    with pytest.raises(NormbenchError, match="differ in optimizer and recipe"):
        compare_regimes([fake_read(64, 40), fake_read(64, 40, optimizer="muon", tuned=True)])


def test_two_folders_of_one_budget_are_compared_across_the_one_thing_they_differ_in():
    from normbench.report.regimes import FACTORS, differing

    assert differing([fake_read(64, 40), fake_read(192, 40)]) == ["width"]
    muon, adamw = fake_read(64, 40, optimizer="muon"), fake_read(64, 40)
    assert differing([muon, adamw]) == ["optimizer"]
    label, order = FACTORS["optimizer"]
    assert [label(r) for r in sorted([muon, adamw], key=order)] == ["adamw", "muon"]  # the reference side first
    tuned, grid = fake_read(64, 40, tuned=True), fake_read(64, 40)
    label, order = FACTORS["recipe"]
    assert differing([tuned, grid]) == ["recipe"]
    assert [label(r) for r in sorted([tuned, grid], key=order)] == ["grid", "tuned"]


def test_the_rank_correlation_reads_what_the_table_reads_finished_or_not():
    """An unfinished side is ranked on the selection val means, as the row table reads it (was: the selection seeds'
    test means beside a table of val means, which listed swaps the table above did not show)."""
    from normbench.report.regimes import rank_correlation_lines

    def read(frame: pd.DataFrame) -> SimpleNamespace:
        return SimpleNamespace(analysis=SimpleNamespace(selected=frame))

    # test means order ngpt last; val means order it first, as the unfinished table does
    unfinished = selected({"layernorm": (85.0, 75.0), "ngpt": (60.0, 91.0), "peri_ln": (90.0, 88.0),
                           "dyt": (84.0, 80.0)}, seeds="select")
    lines = "\n".join(rank_correlation_lines([read(NARROW), read(unfinished)], ["adamw", "muon"]))
    assert f"Spearman's rho of the rows' {VAL}" in lines
    assert "ngpt >" not in lines  # narrow's val order: ngpt 90 first, as unfinished's 91: no swap with ngpt
    finished_lines = "\n".join(rank_correlation_lines([read(NARROW), read(WIDE)], ["adamw", "muon"]))
    assert "Spearman's rho of the row scores" in finished_lines
