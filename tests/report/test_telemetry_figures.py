"""The leaderboard's telemetry: the deepest depth at each layer's lr chosen on val, seed means, end-of-training
table, figures, and the section in leaderboard.md of a real tiny suite."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from normbench.report.style import layer_colour
from normbench.report.telemetry_figures import (
    best_lr_telemetry,
    blank_notes,
    block_maps,
    end_table,
    quantity_figure,
    telemetry_frame,
    telemetry_section,
)
from normbench.train.telemetry import MAX_SAMPLES, QUANTITIES, to_records

STEPS = (0, 10, 20)


def value(layer: str, lr: float, seed: int, step: int, block: int) -> float:
    """A known, distinct value per coordinate."""
    return (1 + (layer == "rezero")) * 1000 * lr + seed + step / 100 + block / 10_000


def make_cells(depths=(2, 4)) -> pd.DataFrame:
    rows = []
    for depth in depths:
        for layer, best_lr in (("layernorm", 1e-3), ("rezero", 3e-3)):
            for lr in (1e-3, 3e-3):
                for seed in (0, 1):
                    score = 80.0 + seed + (10 if lr == best_lr else 0) + (5 if layer == "rezero" else 0)
                    records = [{"step": s, "block": b, **{q: value(layer, lr, seed, s, b) for q in QUANTITIES}}
                               for s in STEPS for b in range(depth)]
                    rows.append({"cell_id": f"{depth}-{layer}-{lr}-{seed}", "layer": layer, "depth": depth, "lr": lr,
                                 "seed": seed, "select": score, "score": 100 - score, "status": "ok",
                                 "telemetry": records})  # test (score) disagrees with val (select): val chooses
    return pd.DataFrame(rows)


def test_frame_is_one_row_per_cell_step_and_block_and_none_is_nan():
    cells = make_cells()
    cells.at[0, "telemetry"] = [{"step": 0, "block": 0, **{q: None for q in QUANTITIES}}]
    frame = telemetry_frame(cells)
    assert len(frame) == 1 + (len(cells) - 1) // 2 * len(STEPS) * 2 + len(cells) // 2 * len(STEPS) * 4
    assert frame.loc[0, QUANTITIES].isna().all()
    assert telemetry_frame(cells.drop(columns="telemetry")).empty
    assert telemetry_frame(cells.assign(telemetry=[[]] * len(cells))).empty


def test_deepest_depth_at_each_layers_lr_chosen_on_val():
    chosen = best_lr_telemetry(telemetry_frame(make_cells()))
    assert set(chosen["depth"]) == {4}
    assert dict(chosen.groupby("layer")["lr"].unique().map(list)) == {"layernorm": [1e-3], "rezero": [3e-3]}
    assert set(chosen["seed"]) == {0, 1}


def test_old_lr_report_and_2x_cells_neither_choose_the_lr_nor_enter_the_maps():
    # report cells at layernorm's other lr (3e-3) with a poisoned val, and a 2x cell at its chosen lr: the lr is still
    # chosen by the selection cells, and the 2x cell (twice the steps) is no part of the chosen rows
    cells = make_cells().assign(role="select")
    extra = cells[(cells["layer"] == "layernorm") & (cells["depth"] == 4)].copy()
    poisoned = extra[extra["lr"] == 3e-3].assign(role="report", select=100.0, seed=[100, 101],
                                                  cell_id=lambda f: f["cell_id"] + "-report")
    twice = extra[(extra["lr"] == 1e-3) & (extra["seed"] == 0)].assign(role="budget", cell_id="2x")
    chosen = best_lr_telemetry(telemetry_frame(pd.concat([cells, poisoned, twice], ignore_index=True)))
    assert dict(chosen.groupby("layer")["lr"].unique().map(list)) == {"layernorm": [1e-3], "rezero": [3e-3]}
    assert "2x" not in set(chosen["cell_id"])


def test_block_maps_are_seed_means_block_by_step_in_the_figures_layer_order():
    chosen = best_lr_telemetry(telemetry_frame(make_cells()))
    assert list(block_maps(chosen, "grad_norm")) == ["layernorm", "rezero"]  # sorted, not by score: every figure
    assert list(block_maps(chosen, "grad_norm", order=["rezero", "layernorm"])) == ["rezero", "layernorm"]
    maps = block_maps(chosen, "grad_norm", order=["rezero", "layernorm"])
    m = maps["rezero"]
    assert list(m.index) == [0, 1, 2, 3] and list(m.columns) == list(STEPS)
    assert m.loc[3, 20] == pytest.approx((value("rezero", 3e-3, 0, 20, 3) + value("rezero", 3e-3, 1, 20, 3)) / 2)


def test_end_table_has_first_middle_last_block_at_the_last_step():
    table = end_table(best_lr_telemetry(telemetry_frame(make_cells())))
    assert list(table["layer"]) == ["rezero"] * 3 + ["layernorm"] * 3
    assert list(table["block"]) == ["0 (first)", "2 (middle)", "3 (last)"] * 2
    expected = (value("layernorm", 1e-3, 0, 20, 3) + value("layernorm", 1e-3, 1, 20, 3)) / 2
    assert table.loc[5, "stream_rms"] == f"{expected:.3g}"
    assert list(table.columns) == ["layer", "block", *QUANTITIES]


def test_end_table_takes_each_cells_own_last_step():
    cells = make_cells(depths=(4,))
    diverged = cells.index[(cells["layer"] == "layernorm") & (cells["lr"] == 1e-3) & (cells["seed"] == 1)][0]
    cells.at[diverged, "telemetry"] = [r for r in cells.at[diverged, "telemetry"] if r["step"] <= 10]
    table = end_table(best_lr_telemetry(telemetry_frame(cells)))
    expected = (value("layernorm", 1e-3, 0, 20, 0) + value("layernorm", 1e-3, 1, 10, 0)) / 2
    assert table.loc[3, "grad_norm"] == f"{expected:.3g}"


def test_figure_has_a_panel_per_layer_on_one_colour_scale():
    chosen = best_lr_telemetry(telemetry_frame(make_cells()))
    for quantity in ("attn_entropy", "update_ratio"):
        fig = quantity_figure(block_maps(chosen, quantity), quantity, depth=4)
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
        assert [ax.get_title() for ax in panels] == ["layernorm", "rezero"]
        assert [ax.title.get_color() for ax in panels] == [layer_colour("layernorm"), layer_colour("rezero")]
        norms = {(c.norm.vmin, c.norm.vmax) for ax in panels for c in ax.collections}
        assert len(norms) == 1


def test_blank_cells_of_zero_initialised_gates_are_explained_under_the_heatmap():
    cells = make_cells(depths=(4,))
    for i in cells.index[cells["layer"] == "rezero"]:  # a zero gate: the branch is off and no ratio is defined
        cells.at[i, "telemetry"] = [{**r, "attn_ratio": 0.0, "update_ratio": None} if r["step"] == 0 else r
                                    for r in cells.at[i, "telemetry"]]
    chosen = best_lr_telemetry(telemetry_frame(cells))
    for quantity, word in (("attn_ratio", "exactly 0"), ("update_ratio", "undefined")):
        maps = block_maps(chosen, quantity)
        notes = blank_notes(maps, quantity)
        assert len(notes) == 1 and notes[0].startswith(f"rezero: blank at step 0: {word}"), notes
        assert "initialised at zero" in notes[0] or "start at zero" in notes[0]
        fig = quantity_figure(maps, quantity, depth=4)
        assert [t.get_text() for t in fig.texts if t.get_gid() == "blank-note"] == notes
    assert blank_notes(block_maps(best_lr_telemetry(telemetry_frame(make_cells())), "attn_ratio"), "attn_ratio") == []


def test_section_writes_a_figure_per_quantity(tmp_path):
    lines = telemetry_section(make_cells(), tmp_path)
    assert lines[0] == "## telemetry at depth 4 (each layer at its selected lr, seed mean)"
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"telemetry_{q}.png" for q in QUANTITIES)
    assert sum(line.startswith("| rezero") for line in "\n".join(lines).splitlines()) == 3
    assert telemetry_section(make_cells().drop(columns="telemetry"), tmp_path) == []


def test_a_cells_telemetry_stays_small_at_depth_36():
    samples = [(s, [[math.pi * 10 ** (-b % 7)] * len(QUANTITIES) for b in range(36)]) for s in range(MAX_SAMPLES)]
    size = len(json.dumps(to_records(samples)))
    # stored with the cell in the ledger (an Optuna user attr): ~11 KB per quantity at depth 36, ten quantities
    assert size < 12_000 * len(QUANTITIES), size


def test_the_leaderboard_of_a_real_suite_shows_telemetry(write_suite, tmp_path):
    from normbench.cli import main

    path = write_suite(train={"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 2},
                       matrix={"depth": [2], "layer": ["layernorm", "rezero"], "lr": [1.0e-3], "seed": [0]})
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 0
    text = (out / "leaderboard.md").read_text()
    assert "## telemetry at depth 2" in text and "![telemetry_attn_entropy](telemetry_attn_entropy.png)" in text
    assert (out / "telemetry_attn_entropy.png").stat().st_size > 0
    assert "telemetry" not in pd.read_csv(out / "results.csv").columns
