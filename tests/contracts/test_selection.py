"""normbench.contracts.selection, the one selection rule, against hand-computed values; and every chooser that uses it
(the report's select_lr, the telemetry figures, bracketing) picks the same lr, ties included."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from normbench.contracts.selection import add_scores, cell_scores, choose_lr, chosen_lrs, seed_mean, select_value
from normbench.contracts.suite import parse_suite
from normbench.report.stats import select_lr
from normbench.report.telemetry_figures import best_lr_telemetry
from normbench.sweep.bracket import bracket_axes

LRS = [1e-3, 3e-3]


def result(val: float | None, test: float | None = None, status: str = "ok", best: float | None = None) -> dict:
    out: dict = {"status": status}
    for key, value in (("val_top1", val), ("test_top1", test), ("best_val_top1", best)):
        if value is not None:
            out[key] = value
    return out


def test_a_diverged_cell_selects_and_scores_zero():
    diverged = result(90.0, 88.0, status="diverged", best=95.0)
    assert select_value(diverged) == 0.0
    assert cell_scores(diverged) == {"score": 0.0, "select": 0.0}
    cells = add_scores(pd.DataFrame([{"status": "diverged", "val_top1": 90.0, "test_top1": 88.0,
                                      "best_val_top1": 95.0},
                                     {"status": "ok", "val_top1": 70.0, "test_top1": 68.0, "best_val_top1": 75.0}]))
    assert cells["select"].tolist() == [0.0, 70.0] and cells["score"].tolist() == [0.0, 68.0]


def test_select_is_the_final_epochs_val_and_falls_back_to_best_val_for_legacy_cells():
    assert select_value(result(71.5, 60.0, best=80.0)) == 71.5  # the final epoch, not the best one
    assert select_value(result(None, best=80.0)) == 80.0       # a ledger from before the test split
    assert select_value(result(math.nan, best=80.0)) == 0.0    # no finite value: nothing to choose on
    assert select_value({"status": "ok"}) == 0.0
    assert cell_scores(result(70.456, 68.123)) == {"score": 68.123, "select": 70.456}  # full precision: MLflow too
    assert cell_scores(result(70.0)) == {}  # a pruned trial: no test score
    legacy = add_scores(pd.DataFrame([{"status": "ok", "best_val_top1": 80.0},
                                      {"status": "diverged", "best_val_top1": 50.0}]))
    assert legacy["select"].tolist() == [80.0, 0.0] and legacy["score"].tolist() == [80.0, 0.0]
    assert legacy.attrs["legacy"]
    empty_test = add_scores(pd.DataFrame([{"status": "ok", "val_top1": 70.0, "test_top1": math.nan,
                                           "best_val_top1": 80.0}]))
    assert empty_test["select"].tolist() == [80.0] and empty_test.attrs["legacy"]


def test_choose_lr_takes_the_highest_mean_and_ties_go_to_the_smaller_lr():
    assert choose_lr({1e-3: 70.0, 3e-3: 81.0, 1e-2: 80.0}) == 3e-3
    assert choose_lr({3e-3: 80.0, 1e-3: 80.0, 1e-2: 79.0}) == 1e-3  # whatever the order given
    assert choose_lr({1e-2: 80.0, 3e-3: 80.0}) == 3e-3
    assert choose_lr({1e-3: math.nan, 3e-3: 50.0}) == 3e-3         # no value never beats a value
    assert choose_lr({3e-3: math.nan, 1e-3: math.nan}) == 1e-3
    with pytest.raises(ValueError):
        choose_lr({})
    assert seed_mean([80.0, 82.0]) == 81.0 and seed_mean([80.0, math.nan]) == 80.0


def cells_with_ties() -> list[tuple[dict, dict]]:
    """(axes, result) per cell. layernorm: 81 at both lrs (80, 82 vs 81, 81): a tie. rezero: 70 vs 76. layerscale:
    a diverged seed counts 0, so 1e-3 has (60 + 0) / 2 = 30, tied with 3e-3's (30 + 30) / 2."""
    vals = {("layernorm", 1e-3): [80.0, 82.0], ("layernorm", 3e-3): [81.0, 81.0],
            ("rezero", 1e-3): [70.0, 70.0], ("rezero", 3e-3): [75.0, 77.0],
            ("layerscale", 1e-3): [60.0, None], ("layerscale", 3e-3): [30.0, 30.0]}
    return [({"depth": 6, "layer": layer, "lr": lr, "seed": seed},
             result(v, 50.0) if v is not None else result(None, status="diverged"))
            for (layer, lr), seeds in vals.items() for seed, v in enumerate(seeds)]


def frame(cells: list[tuple[dict, dict]]) -> pd.DataFrame:
    rows = [{"cell_id": f"{a['layer']}-{a['lr']}-{a['seed']}", **a, "best_val_top1": math.nan, "val_top1": math.nan,
             "test_top1": math.nan, **r} for a, r in cells]
    return add_scores(pd.DataFrame(rows))


def suite(layers: list[str], seeds: list[int]):  # type: ignore[no-untyped-def]
    matrix = {"depth": [6], "layer": layers, "lr": LRS, "seed": seeds}
    return parse_suite({"name": "s", "dataset": {"name": "digits"}, "matrix": matrix, "bracket": True},
                       Path("s.yaml"))


def bracketing_choice(layers: list[str], seeds: list[int], cells: list[tuple[dict, dict]]) -> dict[str, float]:
    """The lr bracketing chose per layer, read off the cells it queues: a step below the grid means it chose the
    smallest lr (1e-3), a step above the largest (3e-3)."""
    return {a["layer"]: LRS[0] if a["lr"] < LRS[0] else LRS[-1]
            for a in bracket_axes(suite(layers, seeds), cells)}


def report_choice(cells: pd.DataFrame) -> dict[str, float]:
    return select_lr(cells, ["layer", "depth"]).set_index("layer")["lr"].to_dict()


def test_every_chooser_sends_a_tie_to_the_smaller_lr():
    cells = cells_with_ties()
    expected = {"layernorm": 1e-3, "rezero": 3e-3, "layerscale": 1e-3}
    assert dict(chosen_lrs(frame(cells), ["layer"]).values.tolist()) == expected
    table = select_lr(frame(cells), ["layer", "depth"]).set_index("layer")
    assert table["lr"].to_dict() == expected
    assert table["select_mean"].to_dict() == {"layernorm": 81.0, "rezero": 76.0, "layerscale": 30.0}
    # bracketing (v3) extends a row with signal from the edge its selection chose (rezero); an exact tie of means is
    # flat within the seeds' spread, so no edge is an optimum: those rows are tried both ways
    assert bracketing_choice(["rezero"], [0, 1], cells[4:8]) == {"rezero": 3e-3}
    tried = {(a["layer"], a["lr"]) for a in bracket_axes(suite(["layernorm", "rezero", "layerscale"], [0, 1]), cells)}
    assert tried == {("layernorm", 3.333e-4), ("layernorm", 9e-3), ("rezero", 9e-3),
                     ("layerscale", 3.333e-4), ("layerscale", 9e-3)}


def test_report_telemetry_and_bracketing_agree_where_float_rounding_decides():
    # the same three seeds at both lrs, summed in another order: 0.1 + 0.2 + 0.3 != 0.3 + 0.2 + 0.1 in floats, so
    # the means differ in their last bit. One summation (seed_mean) everywhere: every chooser sees the same numbers.
    order = {1e-3: [0.3, 0.2, 0.1], 3e-3: [0.1, 0.2, 0.3]}
    cells = [({"depth": 6, "layer": "rezero", "lr": lr, "seed": s}, result(v, 50.0))
             for lr, vals in order.items() for s, v in enumerate(vals)]
    report = report_choice(frame(cells))
    assert report == dict(chosen_lrs(frame(cells), ["layer"]).values.tolist())
    # bracketing sees the same means: equal up to the last bit is flat, so it tries both ways, whatever the order
    assert {a["lr"] for a in bracket_axes(suite(["rezero"], [0, 1, 2]), cells)} == {3.333e-4, 9e-3}
    assert report == dict(best_lr_telemetry(frame(cells))[["layer", "lr"]].drop_duplicates().values.tolist())
