"""normbench.sweep.bracket: which lrs a bracketing round adds, from hand-made finished cells."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from normbench.contracts.suite import parse_suite
from normbench.sweep.bracket import bracket_axes, grid_ratio

MATRIX = {"depth": [6], "layer": ["layernorm", "rezero"], "lr": [1.0e-3, 3.0e-3], "seed": [0, 1]}


def suite(**extra):
    raw = {"name": "b", "dataset": {"name": "digits"}, "matrix": MATRIX, "bracket": True, **extra}
    return parse_suite(raw, Path("b.yaml"))


def done(layer: str, lr: float, vals: list[float], status: str = "ok", test: float = 0.0) -> list:
    return [({"depth": 6, "layer": layer, "lr": lr, "seed": s},
             {"status": status, "val_top1": v, "test_top1": test}) for s, v in enumerate(vals)]


def test_grid_ratio_is_the_grids_own_geometric_step():
    assert grid_ratio([1e-3, 3e-3]) == pytest.approx(3.0)
    assert grid_ratio([1e-4, 1e-3, 1e-2]) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        grid_ratio([1e-3])


def test_a_best_lr_at_the_top_edge_adds_one_step_up_for_every_seed():
    cells = [*done("layernorm", 1e-3, [80, 82]), *done("layernorm", 3e-3, [70, 72]),   # best 1e-3: low edge
             *done("rezero", 1e-3, [30, 28]), *done("rezero", 3e-3, [60, 58])]         # best 3e-3: high edge
    added = bracket_axes(suite(), cells)
    assert added == [{"depth": 6, "layer": "layernorm", "lr": 3.333e-4, "seed": 0},
                     {"depth": 6, "layer": "layernorm", "lr": 3.333e-4, "seed": 1},
                     {"depth": 6, "layer": "rezero", "lr": 9e-3, "seed": 0},
                     {"depth": 6, "layer": "rezero", "lr": 9e-3, "seed": 1}]
    assert list(added[0]) == list(MATRIX)  # matrix key order, so the cell id is the matrix's


def test_rounds_stop_when_interior_diverged_or_at_the_limit():
    base = [*done("rezero", 1e-3, [30, 28]), *done("rezero", 3e-3, [60, 58])]
    interior = [*base, *done("rezero", 9e-3, [50, 40])]
    assert bracket_axes(suite(), interior) == []
    diverged = [*base, *done("rezero", 9e-3, [0, 0], status="diverged")]  # the new edge blew up: best is interior
    assert bracket_axes(suite(), diverged) == []
    climbing = [*base, *done("rezero", 9e-3, [70, 70]), *done("rezero", 2.7e-2, [80, 80])]
    assert {a["lr"] for a in bracket_axes(suite(), climbing)} == {8.1e-2}
    assert bracket_axes(suite(bracket_max_steps=2), climbing) == []  # two steps beyond already


def test_selection_reads_val_not_test():
    # test prefers 1e-3 (the low edge: a step down); val prefers 3e-3 (the high edge: a step up), and val decides
    cells = [*done("rezero", 1e-3, [30, 30], test=99.0), *done("rezero", 3e-3, [60, 60], test=1.0)]
    assert {a["lr"] for a in bracket_axes(suite(), cells)} == {9e-3}


def at_digits_size(cells: list, num_classes: int = 10, val_size: int = 360) -> list:
    """The cells with the sizes that place chance (10% of 360 val images: at chance up to 13.16%)."""
    return [(axes, {**result, "num_classes": num_classes, "val_size": val_size}) for axes, result in cells]


def test_a_row_at_chance_at_every_lr_steps_up_not_down():
    # the reported case: rezero at exactly chance at both lrs (identical per seed: the model has not moved). The
    # tie-break picks the smaller lr, but nothing learned: the step goes up from the largest lr, never below 1e-3
    chance = [10.28, 9.72]
    cells = at_digits_size([*done("rezero", 1e-3, chance), *done("rezero", 3e-3, chance)])
    added = bracket_axes(suite(), cells)
    assert {a["lr"] for a in added} == {9e-3} and len(added) == 2
    # the next round, still at chance: up again; at the limit, stop
    more = at_digits_size([*cells[:4], *done("rezero", 9e-3, chance)])
    assert {a["lr"] for a in bracket_axes(suite(), more)} == {2.7e-2}
    assert bracket_axes(suite(bracket_max_steps=1), more) == []
    # at chance below a largest lr that diverged: nothing between chance and divergence, stop
    blew_up = at_digits_size([*done("rezero", 1e-3, chance), *done("rezero", 3e-3, [0, 0], status="diverged")])
    assert bracket_axes(suite(), blew_up) == []


def test_a_flat_row_above_chance_is_still_extended_and_the_leaderboard_flags_it():
    from normbench.contracts.selection import FLAT, add_scores
    from normbench.report.stats import select_lr
    from normbench.report.tables import layer_table

    # 70.5 vs 70.5 with seeds 5 apart: the lrs are indistinguishable, and the tie-break's choice (the smaller lr) is
    # the low edge. Protocol v2 labels the row "no signal" but still steps down: a label never stops the search
    cells = at_digits_size([*done("layernorm", 1e-3, [68, 73]), *done("layernorm", 3e-3, [69, 72])])
    assert {a["lr"] for a in bracket_axes(suite(), cells)} == {3.333e-4}
    frame = pd.DataFrame([{"cell_id": f"{a['lr']}-{a['seed']}", **a, "best_val_top1": r["val_top1"], **r}
                          for a, r in cells])
    selected = select_lr(add_scores(frame), ["layer", "depth"])
    assert selected["signal"].tolist() == [FLAT]
    assert layer_table(selected, ["layer"])["edge"].tolist() == [
        "no signal across lrs (flat within the seeds' spread); edge (lowest lr)"]  # a label beside the edge


def test_a_seed_stalled_at_a_non_selected_lr_does_not_stop_the_search():
    # the published case: pre-LN at depth 36, best at the smallest lr tried (85, 84), one seed of the other lr
    # stalled (80, 20). That spread made v1 call the row flat and stop; v2 steps down until interior or capped
    cells = at_digits_size([*done("layernorm", 1e-3, [85, 84]), *done("layernorm", 3e-3, [80, 20])])
    added = bracket_axes(suite(), cells)
    assert {a["lr"] for a in added} == {3.333e-4} and len(added) == 2
    interior = [*cells, *at_digits_size(done("layernorm", 3.333e-4, [70, 71]))]
    assert bracket_axes(suite(), interior) == []  # 1e-3 is interior now
    lower = [*cells, *at_digits_size(done("layernorm", 3.333e-4, [88, 86]))]  # better again: a step further
    assert {a["lr"] for a in bracket_axes(suite(), lower)} == {1.111e-4}
    assert bracket_axes(suite(bracket_max_steps=1), lower) == []  # the cap


def test_edge_reason_names_the_cap_or_bracketing_off():
    from normbench.contracts.selection import edge_reason

    grid = [1e-3, 3e-3]
    assert edge_reason([3.3e-4, 1e-3, 3e-3], grid, "low", bracket=True, max_steps=1) == "cap reached"
    assert edge_reason([3.3e-4, 1e-3, 3e-3], grid, "low", bracket=True, max_steps=2) == ""
    assert edge_reason([1e-3, 3e-3], grid, "high", bracket=False, max_steps=2) == "bracketing off"


def test_a_genuine_bottom_edge_optimum_still_steps_down():
    cells = at_digits_size([*done("layernorm", 1e-3, [80, 82]), *done("layernorm", 3e-3, [60, 62])])
    assert {a["lr"] for a in bracket_axes(suite(), cells)} == {3.333e-4}
