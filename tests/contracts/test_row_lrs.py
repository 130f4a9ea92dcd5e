"""`lr_by_layer`: a layer's own lr grid in place of `matrix.lr`, read by the cells, bracketing, the edge column,
`--set` narrowing and the leaderboard header; refused with the fix when it names no layer or leaves the lattice."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from normbench.cli import main
from normbench.contracts.suite import load_suite, parse_suite
from normbench.errors import SuiteError
from normbench.report.analysis import with_edge_reasons
from normbench.report.header import recipe_lines
from normbench.sweep.bracket import bracket_axes

MATRIX = {"depth": [6], "layer": ["layernorm", "peri_ln"], "lr": [1.0e-3, 3.0e-3], "seed": [0, 1]}
HIGH = [9.0e-3, 2.7e-2]  # two grid steps (ratio 3) above the shared grid


def suite(**extra):
    raw = {"name": "r", "dataset": {"name": "digits"}, "matrix": MATRIX, "bracket": True,
           "lr_by_layer": {"peri_ln": HIGH}, **extra}
    return parse_suite(raw, Path("r.yaml"))


def test_a_layer_with_its_own_grid_trains_only_those_lrs_and_the_others_the_matrix_lrs():
    cells = [(c.axes["layer"], c.axes["lr"], c.axes["seed"]) for c in suite().cells()]
    assert cells == [("layernorm", 1e-3, 0), ("layernorm", 1e-3, 1), ("layernorm", 3e-3, 0), ("layernorm", 3e-3, 1),
                     ("peri_ln", 9e-3, 0), ("peri_ln", 9e-3, 1), ("peri_ln", 2.7e-2, 0), ("peri_ln", 2.7e-2, 1)]
    assert suite().lr_grid("peri_ln") == HIGH and suite().lr_grid("layernorm") == [1e-3, 3e-3]


def test_without_lr_by_layer_the_cells_are_the_plain_product_in_file_order():
    plain = parse_suite({"name": "r", "dataset": {"name": "digits"}, "matrix": MATRIX}, Path("r.yaml"))
    assert [c.cell_id for c in plain.cells()][:3] == ["depth=6,layer=layernorm,lr=0.001,seed=0",
                                                      "depth=6,layer=layernorm,lr=0.001,seed=1",
                                                      "depth=6,layer=layernorm,lr=0.003,seed=0"]
    assert len(plain.cells()) == 8


def test_the_default_lr_bounds_widen_to_hold_a_layers_own_grid():
    assert suite(lr_by_layer={"peri_ln": [8.1e-2, 0.243]}).lr_bounds[1] == pytest.approx(0.243)


def _done(layer: str, lr: float, vals: list[float]) -> list:
    return [({"depth": 6, "layer": layer, "lr": lr, "seed": s}, {"status": "ok", "val_top1": v, "test_top1": 0.0})
            for s, v in enumerate(vals)]


def test_bracketing_steps_from_the_rows_own_grid():
    """With a cap of 2 steps beyond each end, peri_ln's top edge 2.7e-2 is 0 steps beyond its own grid (a step is
    due) and would be 2 beyond the shared one (none)."""
    cells = [*_done("layernorm", 1e-3, [80, 82]), *_done("layernorm", 3e-3, [70, 72]),
             *_done("peri_ln", 9e-3, [60, 62]), *_done("peri_ln", 2.7e-2, [70, 72])]  # best at its own top edge
    added = {(a["layer"], a["lr"]) for a in bracket_axes(suite(bracket_max_steps=2), cells)}
    assert added == {("layernorm", 3.333e-4), ("peri_ln", 8.1e-2)}


def test_a_rows_own_grid_steps_on_the_shared_lattice():
    """Its 4-significant-digit lrs have a ratio a hair off the shared grid's (3.156e-2 / 9.986e-3 = 3.1605): stepping
    by that would leave the lattice (0.09974) where every other row's next lr is 0.09973."""
    lattice = suite(matrix={**MATRIX, "lr": [1.0e-3, 3.16e-3]}, lr_by_layer={"peri_ln": [9.986e-3, 3.156e-2]})
    cells = [*_done("layernorm", 1e-3, [80, 82]), *_done("layernorm", 3.16e-3, [70, 72]),
             *_done("peri_ln", 9.986e-3, [60, 62]), *_done("peri_ln", 3.156e-2, [70, 72])]
    assert {(a["layer"], a["lr"]) for a in bracket_axes(lattice, cells)} == {("layernorm", 3.165e-4),
                                                                           ("peri_ln", 0.09973)}


def test_a_row_stepping_down_from_its_own_grid_meets_the_shared_rows_value():
    """The long suite's lattice ([3.16e-4, 1e-3], ratio 3.1646): pre-LN stepping up from 1e-3 reaches 0.003165; the
    gamma variant stepping down from its own 1.002e-2 must reach the same value (1.002e-2 / 3.1646 is 0.003166)."""
    long = suite(matrix={**MATRIX, "lr": [3.16e-4, 1.0e-3]}, lr_by_layer={"peri_ln": [1.002e-2, 3.171e-2]})
    cells = [*_done("layernorm", 3.16e-4, [70, 72]), *_done("layernorm", 1e-3, [80, 82]),
             *_done("peri_ln", 1.002e-2, [80, 82]), *_done("peri_ln", 3.171e-2, [70, 72])]
    assert {(a["layer"], a["lr"]) for a in bracket_axes(long, cells)} == {("layernorm", 0.003165),
                                                                        ("peri_ln", 0.003165)}


def test_the_edge_column_counts_a_cap_from_the_rows_own_grid():
    """bracket_max_steps counts steps beyond the row's grid: peri_ln's 2.7e-2 is its own grid's top, so a step is
    still due ("unfinished"); read against the shared grid it would be two steps beyond, "cap reached"."""
    capped = suite(bracket_max_steps=2)
    rows = [{"layer": "peri_ln", "lr": lr, "seed": s, "status": "ok", "select": v, "score": v, "role": "select"}
            for lr, vals in ((3e-3, [40, 41]), (9e-3, [60, 61]), (2.7e-2, [70, 71])) for s, v in enumerate(vals)]
    cells = pd.DataFrame(rows)
    selected = pd.DataFrame([{"layer": "peri_ln", "lr": 2.7e-2, "edge": "high"}])
    own = with_edge_reasons(selected, cells, ["layer"], capped.lr_grid, 2, bracketing=True)
    shared = with_edge_reasons(selected, cells, ["layer"], capped.matrix["lr"], 2, bracketing=True)
    assert own["edge_why"].tolist() == ["unfinished"]
    assert shared["edge_why"].tolist() == ["cap reached"]


def test_the_leaderboard_header_names_each_layers_own_grid():
    assert "peri_ln starts from lr [0.009, 0.027] instead" in recipe_lines(suite())[0]


@pytest.mark.parametrize("grids, expected", [
    ({"peri_lm": HIGH}, "lr_by_layer.peri_lm: not a layer of this suite (did you mean `peri_ln`?)"),
    ({"peri_ln": [1e-2, 3e-2]}, "lr_by_layer.peri_ln: [0.01, 0.03] off the lattice of matrix.lr [0.001, 0.003] "
                                "(ratio 3), where bracketing and every other row step; use lrs a whole number of its "
                                "steps from it, e.g. 0.009"),
    ({"peri_ln": [9.001e-3, 2.7e-2]}, "lr_by_layer.peri_ln: [0.009001] off the lattice"),
    ({"peri_ln": [9e-3]}, "lr_by_layer.peri_ln: bracketing needs at least two lrs per grid (a step beyond the edge "
                          "is the grid's ratio), got [0.009]; add one a grid step away, e.g. 0.027"),
    ({"peri_ln": [9e-3, 9e-3]}, "lr_by_layer.peri_ln: repeated lr in [0.009, 0.009]"),
    ({"peri_ln": [-1e-3, 9e-3]}, "lr_by_layer.peri_ln: expected a list of positive lrs"),
    (["peri_ln"], "lr_by_layer: expected a mapping of layer -> list of lrs"),
])
def test_a_bad_grid_is_refused_naming_the_fix(grids, expected):
    with pytest.raises(SuiteError) as error:
        suite(lr_by_layer=grids)
    assert expected in str(error.value)


def test_lr_bounds_that_leave_out_a_layers_own_lrs_are_refused():
    with pytest.raises(SuiteError, match=r"lr_bounds: \[1e-05, 0.01\] leaves out lr_by_layer.peri_ln \[0.027\]"):
        suite(lr_bounds=[1e-5, 1e-2])


def test_a_steadier_claim_between_rows_whose_grids_share_too_few_lrs_is_refused():
    with pytest.raises(SuiteError, match="peri_ln steadier_than layernorm compares the lrs both rows tried, and their "
                                         r"start grids share none \(lr_by_layer\)"):
        suite(claims=[{"layer": "peri_ln", "steadier_than": "layernorm", "depth": 6}])
    shared = suite(lr_by_layer={"peri_ln": [1e-3, 3e-3, 9e-3]},
                   claims=[{"layer": "peri_ln", "steadier_than": "layernorm", "depth": 6}])
    assert shared.claims[0]["steadier_than"] == "layernorm"


def test_tune_makes_a_study_per_lr_of_each_rows_own_grid():
    from normbench.contracts.tuning import search_keys

    tuned = suite(tune={"trials": 2, "space": {"weight_decay": {"low": 0.0, "high": 0.1}}})
    assert [(k["layer"], k["lr"]) for k in search_keys(tuned)] == [("layernorm", 1e-3), ("layernorm", 3e-3),
                                                                   ("peri_ln", 9e-3), ("peri_ln", 2.7e-2)]


def test_a_suite_without_matrix_lr_cannot_replace_it():
    with pytest.raises(SuiteError, match="the suite has no matrix.lr; add the lrs every other layer trains at"):
        suite(matrix={k: v for k, v in MATRIX.items() if k != "lr"}, bracket=False)


def test_narrowing_the_layers_with_set_drops_the_grid_of_a_layer_left_out(write_suite, capsys):
    path = write_suite(matrix=MATRIX, lr_by_layer={"peri_ln": HIGH})
    narrowed = load_suite(path, ["matrix.layer=[layernorm]"])
    assert narrowed.lr_by_layer == {}
    assert "--set leaves peri_ln out of the suite: dropped its lr_by_layer grid" in narrowed.notes
    assert main(["run", str(path), "--dry-run", "--set", "matrix.layer=[layernorm]"]) == 0
    assert "dropped its lr_by_layer grid" in capsys.readouterr().err


def test_changing_matrix_lr_with_set_drops_every_grid(write_suite):
    path = write_suite(matrix=MATRIX, lr_by_layer={"peri_ln": HIGH})
    moved = load_suite(path, ["matrix.lr=[1e-3]"])
    assert moved.lr_by_layer == {} and {c.axes["lr"] for c in moved.cells()} == {1e-3}
    assert moved.notes == ["--set changes matrix.lr: dropped the lr_by_layer grids of peri_ln, so every layer trains "
                           "the new lrs (--set lr_by_layer={...} gives grids of their own)"]
    assert load_suite(path, ["matrix.lr=[1e-3]", "lr_by_layer={peri_ln: [0.5]}"]).lr_by_layer == {"peri_ln": [0.5]}
