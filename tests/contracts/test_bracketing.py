"""normbench.contracts.bracketing: protocol v3's rule for one row, and the reasons the leaderboard prints."""

from __future__ import annotations

import pytest

from normbench.contracts.bracketing import DEFAULT_LR_BOUNDS, bracket_row, step, steps_per_round
from normbench.report.analysis import stop_text
from normbench.report.tables import edge_text

GRID = [1.0e-3, 3.16e-3]  # the modern suite's grid: one step is half a decade
CHANCE = [(10.3, True, False), (9.7, True, False)]


def ok(*values: float) -> list[tuple[float, bool, bool]]:
    return [(v, False, False) for v in values]


def test_a_step_is_about_half_a_decade_in_whole_grid_steps_on_the_published_lattice():
    assert steps_per_round(3.16) == 1 and steps_per_round(3.0) == 1
    assert steps_per_round(2.0) == 2 and steps_per_round(10.0) == 1
    # the lrs the modern ledger's v2 rounds already trained: v3 lands on the same cells, not next to them
    assert step(1e-3, 3.16, "low") == 0.0003165 and step(0.0003165, 3.16, "low") == 0.0001002
    assert step(3.16e-3, 3.16, "high") == 0.009986 and step(0.009986, 3.16, "high") == 0.03156


def test_a_row_at_chance_walks_both_ways_to_the_bounds_and_says_which_stopped_it():
    tried = {lr: CHANCE for lr in (1.003e-5, 3.17e-5, 1.002e-4, 0.0003165, 1e-3, 3.16e-3, 0.009986, 0.03156)}
    plan = bracket_row(tried, GRID)
    assert plan.new == (0.09973,) and plan.stopped == {"low": "lr bound 1e-05"} and plan.no_signal
    tried[0.09973] = CHANCE
    done = bracket_row(tried, GRID)
    assert done.new == () and done.stopped == {"low": "lr bound 1e-05", "high": "lr bound 0.1"}
    assert stop_text(done, None) == "lr bound 1e-05 below, lr bound 0.1 above"
    assert edge_text("", "at chance", stop_text(done, None)) == (
        "no signal (best lr at chance); explored to the lr bound 1e-05 below, lr bound 0.1 above")
    assert edge_text("", "at chance", stop_text(plan, None)) == "no signal (best lr at chance); bracketing unfinished"


def test_a_row_with_signal_keeps_v2s_steps_the_optional_cap_and_the_bounds():
    edge = {1e-3: ok(80, 82), 3.16e-3: ok(60, 61)}
    assert bracket_row(edge, GRID).new == (0.0003165,)
    beyond = {**edge, 0.0003165: ok(85, 86)}
    assert bracket_row(beyond, GRID, max_steps=1).stopped == {"low": "cap reached"}
    assert bracket_row(beyond, GRID, bounds=(3e-4, 1e-1)).stopped == {"low": "lr bound 0.0003"}
    assert stop_text(bracket_row(beyond, GRID, max_steps=1), "low") == "cap reached"
    interior = {**beyond, 0.0001002: ok(50, 52)}
    assert bracket_row(interior, GRID) == bracket_row(interior, GRID, bounds=DEFAULT_LR_BOUNDS)
    assert bracket_row(interior, GRID).new == () and bracket_row(interior, GRID).stopped == {}


def test_a_flat_row_goes_both_ways_but_not_past_a_side_that_diverged():
    flat = {1e-3: ok(96.0, 97.5), 3.16e-3: ok(96.5, 97.0)}
    assert bracket_row(flat, GRID).new == (0.0003165, 0.009986)
    blew_up = {**flat, 0.009986: [(0.0, False, True), (0.0, False, True)]}
    # the divergence gives the row signal (its mean is 0): v2 sees 1e-3 interior above... and steps below only
    assert bracket_row(blew_up, GRID).new == (0.0003165,)


@pytest.mark.parametrize("bounds", [(1e-5, 1e-1), (1e-4, 1e-2)])
def test_nothing_is_ever_queued_outside_the_bounds(bounds):
    tried = {lr: CHANCE for lr in (1e-3, 3.16e-3)}
    for _ in range(12):
        plan = bracket_row(tried, GRID, bounds=bounds)
        assert all(bounds[0] * 0.999 <= lr <= bounds[1] * 1.001 for lr in plan.new)
        if not plan.new:
            break
        tried.update({lr: CHANCE for lr in plan.new})
    assert not plan.new and set(plan.stopped) == {"low", "high"}


def test_more_seeds_do_not_flatten_a_row_the_same_noise_leaves_signalled_at_two():
    """The modern sweep's mhc at 4 seeds: lr means 71.0 / 82.6 / 80.1 against 4-seed ranges of 13.9 / 13.3 / 15.5.
    Read raw, those ranges (1.83x what 2 seeds show at one noise level) called the row flat and sent it half a decade
    both ways; scaled to 2 seeds (7.6) the row has signal and its interior best stands."""
    from normbench.contracts.selection import FLAT, lr_signal, seed_spread

    mhc = {3.16e-4: ok(68.6, 65.0, 78.9, 71.7), 1e-3: ok(81.1, 83.1, 89.7, 76.4), 3.16e-3: ok(81.1, 70.3, 85.8, 83.1)}
    assert seed_spread(mhc.values()) == pytest.approx(13.9 * 1.128 / 2.059)
    assert lr_signal(mhc) != FLAT and bracket_row(mhc, GRID).new == ()
    two = {lr: cells[:2] for lr, cells in mhc.items()}  # two seeds: the range is its own 2-seed expectation
    assert seed_spread(two.values()) == pytest.approx(sorted([3.6, 2.0, 10.8])[1])
