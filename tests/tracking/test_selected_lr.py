"""The `at_selected_lr` tag the view filters on (tracking/selected_lr.py): the leaderboard's lr choice per row, so a
row's mean in MLflow is its score even where report cells trained at an lr the row no longer selects."""

from __future__ import annotations

from normbench.tracking.selected_lr import at_selected_lr


def cell(key: str, study: str, role: str, lr: float, val: float | None, layer: str = "a", status: str = "ok"):
    return (key, study, role, {"depth": 2, "layer": layer, "lr": lr, "seed": 0}, {"status": status, "val_top1": val})


def test_report_cells_at_a_row_s_old_lr_are_not_at_its_selected_lr():
    cells = [cell("s1", "run:x", "select", 1e-3, 80.0), cell("s2", "run:x", "select", 1e-3, 82.0),
             cell("s3", "bracket:x:1", "select", 3e-4, 85.0), cell("s4", "bracket:x:1", "select", 3e-4, 84.0),
             cell("r1", "report:x", "report", 1e-3, 90.0), cell("r2", "report:x", "report", 3e-4, 91.0),
             cell("b1", "budget:x", "budget", 3e-4, 91.0)]
    assert at_selected_lr(cells) == {"s1": "no", "s2": "no", "s3": "yes", "s4": "yes", "r1": "no", "r2": "yes"}


def test_ties_go_to_the_smaller_lr_a_diverged_cell_selects_zero_and_rows_are_apart():
    cells = [cell("s1", "run:x", "select", 1e-3, 80.0), cell("s2", "run:x", "select", 3e-4, 80.0),
             cell("d1", "run:x", "select", 1e-2, None, layer="b", status="diverged"),
             cell("d2", "run:x", "select", 1e-3, 10.0, layer="b")]
    assert at_selected_lr(cells) == {"s1": "no", "s2": "yes", "d1": "no", "d2": "yes"}


def test_a_tuned_re_run_is_its_search_s_choice_and_search_trials_and_failures_get_no_tag():
    cells = [cell("t1", "tuned:x", "report", 5e-3, 70.0), cell("q1", "tune:x:depth=2,layer=a", "tune", 1e-3, 60.0),
             ("f1", "run:x", "select", {"depth": 2, "layer": "a", "lr": 1e-3, "seed": 1}, None)]
    assert at_selected_lr(cells) == {"t1": "yes"}
