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


def test_lrs_tried_before_the_seeds_grew_get_the_missing_seeds_first_and_only_once():
    """A suite resumed with 4 selection seeds where its earlier rounds ran 2: a row's lr means must rest on the same
    seeds before they choose its lr or its next one (and the claims that pair selection seeds need every lr on all)."""
    four = suite(matrix={**MATRIX, "seed": [0, 1, 2, 3]})
    cells = [*done("layernorm", 1e-3, [80, 82, 81, 80]), *done("layernorm", 3e-3, [70, 72, 71, 70]),
             *done("layernorm", 3.333e-4, [60, 62]),                                 # a round of the 2-seed days
             *done("rezero", 1e-3, [30, 28, 29, 30]), *done("rezero", 3e-3, [60, 58, 59, 60])]  # complete: steps up
    added = bracket_axes(four, cells)
    assert [(a["layer"], a["lr"], a["seed"]) for a in added] == [
        ("layernorm", 3.333e-4, 2), ("layernorm", 3.333e-4, 3),                   # its seeds first, no new lr
        *[("rezero", 9e-3, seed) for seed in range(4)]]
    queued_before = {four.cell(a).cell_id for a in added if a["layer"] == "layernorm"}  # e.g. failed for good
    assert [a["layer"] for a in bracket_axes(four, cells, queued_before)] == ["rezero"] * 4  # not asked again


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


def test_a_row_at_chance_at_every_lr_is_extended_both_ways_until_the_lr_bounds():
    # rezero at exactly chance at both lrs (the model has not moved): no optimum to stay near, so bracketing v3
    # tries half a decade below the smallest and above the largest lr, round after round, until the bounds
    chance = [10.28, 9.72]
    cells = at_digits_size([*done("rezero", 1e-3, chance), *done("rezero", 3e-3, chance)])
    added = bracket_axes(suite(), cells)
    assert sorted({a["lr"] for a in added}) == [3.333e-4, 9e-3] and len(added) == 4
    more = at_digits_size([c for lr in (3.333e-4, 1e-3, 3e-3, 9e-3) for c in done("rezero", lr, chance)])
    assert sorted({a["lr"] for a in bracket_axes(suite(), more)}) == [1.111e-4, 2.7e-2]
    # the lr bounds stop each side on its own: below 1.111e-4 and above 2.7e-2 both leave [1e-4, 3e-2]
    lrs = (1.111e-4, 3.333e-4, 1e-3, 3e-3, 9e-3, 2.7e-2)
    bounded = at_digits_size([c for lr in lrs for c in done("rezero", lr, chance)])
    assert bracket_axes(suite(lr_bounds=[1e-4, 3e-2]), bounded) == []
    assert {a["lr"] for a in bracket_axes(suite(lr_bounds=[1e-4, 1e-1]), bounded)} == {8.1e-2}
    # at chance below a largest lr that diverged: nothing between chance and divergence above; below, keep going
    blew_up = at_digits_size([*done("rezero", 1e-3, chance), *done("rezero", 3e-3, [0, 0], status="diverged")])
    assert {a["lr"] for a in bracket_axes(suite(), blew_up)} == {3.333e-4}


def test_a_row_at_chance_with_an_interior_best_is_tried_lower_and_higher():
    # the published NormFormer case: three lrs near chance, the best (by noise) interior. Protocol v2 stopped there;
    # the row was untrained at every lr tried, and one seed at the next lr down reaches 58%
    cells = at_digits_size([*done("normformer", 1e-3, [11.0, 12.0]), *done("normformer", 3e-3, [12.5, 12.9]),
                            *done("normformer", 9e-3, [10.0, 10.5])])
    assert sorted({a["lr"] for a in bracket_axes(suite(), cells)}) == [3.333e-4, 2.7e-2]
    # once the lower lr learns, the row has signal and v2's rule takes over: a step below the new edge
    learned = [*cells, *at_digits_size(done("normformer", 3.333e-4, [58.0, 55.0])),
               *at_digits_size(done("normformer", 2.7e-2, [10.0, 10.0]))]
    assert {a["lr"] for a in bracket_axes(suite(), learned)} == {1.111e-4}


def test_a_row_with_an_interior_best_and_signal_gets_nothing_new():
    cells = at_digits_size([*done("layernorm", 1e-3, [70, 72]), *done("layernorm", 3e-3, [85, 86]),
                            *done("layernorm", 9e-3, [60, 64])])
    assert bracket_axes(suite(), cells) == []


def test_a_flat_row_above_chance_is_still_extended_and_the_leaderboard_flags_it():
    from normbench.contracts.selection import FLAT, add_scores
    from normbench.report.stats import select_lr
    from normbench.report.tables import layer_table

    # 70.5 vs 70.5 with seeds 5 apart: the lrs are indistinguishable, so neither the tie-break's edge nor an
    # interior best is an optimum: v3 extends both ways, and the leaderboard says the row has no signal yet
    cells = at_digits_size([*done("layernorm", 1e-3, [68, 73]), *done("layernorm", 3e-3, [69, 72])])
    assert {a["lr"] for a in bracket_axes(suite(), cells)} == {3.333e-4, 9e-3}
    frame = pd.DataFrame([{"cell_id": f"{a['lr']}-{a['seed']}", **a, "best_val_top1": r["val_top1"], **r}
                          for a, r in cells])
    selected = select_lr(add_scores(frame), ["layer", "depth"])
    assert selected["signal"].tolist() == [FLAT]
    assert layer_table(selected, ["layer"])["edge"].tolist() == [
        "no signal across lrs (flat within the seeds' spread); edge (lowest lr)"]  # a label beside the edge
    # a clearly lower mean below gives the row signal; the lr tied with its best above is no lower: one step up
    lower = [*cells, *at_digits_size(done("layernorm", 3.333e-4, [40, 42]))]
    assert {a["lr"] for a in bracket_axes(suite(), lower)} == {9e-3}


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


def test_a_genuine_bottom_edge_optimum_still_steps_down():
    cells = at_digits_size([*done("layernorm", 1e-3, [80, 82]), *done("layernorm", 3e-3, [60, 62])])
    assert {a["lr"] for a in bracket_axes(suite(), cells)} == {3.333e-4}
