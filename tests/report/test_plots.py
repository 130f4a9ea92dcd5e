"""Figures and tables fit for a paper: one colour and order per layer in every figure, a readable grid, intervals
within 0-100, diverged seeds drawn apart from the means, lrs with 3 significant digits, no `=None` in the header."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import zlib

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from normbench.contracts.selection import add_scores
from normbench.contracts.suite import load_suite
from normbench.report.header import recipe_lines, seeds_line
from normbench.report.plots import depth_figure, lr_figure, sensitivity_figure, step_figure, write_plots
from normbench.report.stats import lr_sensitivity, select_lr, selected_cells
from normbench.report.style import (
    CANONICAL,
    DIVERGED_LABEL,
    DPI,
    EXTRA_COLOURS,
    grid,
    layer_colour,
    layer_order,
    lr_text,
    ratio_text,
    window_text,
)
from normbench.report.tables import layer_table
from normbench.report.telemetry_figures import block_maps, quantity_figure

LAYERS = ("rezero", "layernorm", "layerscale")
LRS = (1e-3, 3.1623e-3, 1e-2)


def cell(layer: str, depth: int, lr: float, seed: int, test: float, status: str = "ok") -> dict:
    ok = status == "ok"
    return {"cell_id": f"{layer}-{depth}-{lr}-{seed}", "layer": layer, "depth": depth, "lr": lr, "seed": seed,
            "status": status, "val_top1": test if ok else math.nan, "test_top1": test if ok else math.nan}


def make_cells(depths=(6, 12, 24, 48)) -> pd.DataFrame:
    return add_scores(pd.DataFrame([cell(layer, d, lr, s, 60.0 + 10 * i + s - abs(math.log10(lr) + 2.5))
                                    for i, layer in enumerate(LAYERS) for d in depths for lr in LRS
                                    for s in range(3)]))


@pytest.mark.parametrize(("lr", "text"), [(0.0999, "0.0999"), (0.0031623, "0.00316"), (3.1623e-4, "0.000316"),
                                          (1e-3, "0.001"), (0.09999, "0.1")])
def test_lrs_print_with_3_significant_digits(lr, text):
    assert lr_text(lr) == text


def test_a_window_span_is_rounded_and_drops_trailing_zeros():
    assert window_text(0.0031623, 0.031623) == "0.00316–0.0316 (x10)"
    assert window_text(3.1623e-4, 0.0031592) == "0.000316–0.00316 (x10)"  # as printed, not x9.99
    assert window_text(0.01, 0.09999) == "0.01–0.1 (x10)"
    assert window_text(3e-3, 3e-3) == "0.003 (x1)"
    assert (ratio_text(9.999), ratio_text(3.0), ratio_text(1000.0), ratio_text(31.62)) == ("10", "3", "1000", "31.6")


def test_tables_and_the_header_print_lrs_alike():
    cells = make_cells(depths=(6,))
    table = layer_table(select_lr(cells, ["layer", "depth"]), ["layer"])
    assert set(table["lr (val-selected)"]) == {"0.00316"}
    assert "lrs tried: 0.001, 0.00316, 0.01" in seeds_line(cells)


def test_every_layer_has_one_colour_and_the_built_ins_are_all_distinct():
    from normbench.layers import list_layers

    assert set(CANONICAL) == set(list_layers())  # a new built-in layer gets its fixed place here
    assert len({layer_colour(layer) for layer in CANONICAL}) == len(CANONICAL)
    # a combination's colour is a crc32 of its name, the same in every process (Python's hash() is salted per run)
    code = "from normbench.report.style import layer_colour; print(layer_colour('rmsnorm+layerscale'))"
    colours = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                              capture_output=True, text=True, check=True).stdout.strip() for seed in ("0", "1")}
    expected = EXTRA_COLOURS[zlib.crc32(b"rmsnorm+layerscale") % len(EXTRA_COLOURS)]
    assert colours == {layer_colour("rmsnorm+layerscale")} == {expected}
    assert layer_order(["rezero", "layernorm", "dyt"], ["rezero", "layernorm"]) == ["rezero", "layernorm", "dyt"]
    assert layer_order(["rezero", "layernorm"]) == ["layernorm", "rezero"]


def test_every_figure_draws_a_layer_in_its_colour_in_one_order():
    cells = make_cells()
    selected = select_lr(cells, ["layer", "depth"]).assign(sensitivity=1.0)
    history = pd.DataFrame([{"cell_id": c, "step": step, "val_top1": 50.0 + step}
                            for c in cells["cell_id"] for step in (10, 20)])
    text = {"dataset": "digits", "order": None}
    figures = [depth_figure(cells, selected, epochs="1", **text), lr_figure(cells, epochs="1", **text),
               step_figure(history, selected_cells(cells, selected, ["layer", "depth"]), **text),
               sensitivity_figure(selected, table_keys=["depth"], **text)]
    expected = {layer: layer_colour(layer) for layer in LAYERS}
    for fig in figures:
        drawn = _colours_by_label(fig)
        assert {layer: drawn[layer] for layer in LAYERS} == expected
        legend = [t.get_text().split(" ")[0] for t in fig.legends[0].get_texts()]
        assert [name for name in legend if name in LAYERS] == sorted(LAYERS)
    telemetry = pd.DataFrame([{"cell_id": layer, "layer": layer, "step": 0, "block": 0, "grad_norm": 1.0 + i}
                              for i, layer in enumerate(LAYERS)])
    heatmap = quantity_figure(block_maps(telemetry, "grad_norm"), "grad_norm", depth=1)
    titles = {ax.get_title(): to_hex(ax.title.get_color()) for ax in heatmap.axes if ax.get_title()}
    assert list(titles) == sorted(LAYERS) and titles == expected


def _colours_by_label(fig) -> dict[str, str]:
    """Each labelled artist's colour: error-bar lines, plain lines and bars."""
    colours = {}
    for ax in fig.axes:
        for container in ax.containers:
            label = container.get_label()
            artist = container.lines[0] if hasattr(container, "lines") else container.patches[0]
            colours[label] = to_hex(artist.get_color() if hasattr(artist, "get_color") else artist.get_facecolor())
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                colours[line.get_label()] = to_hex(line.get_color())
    return colours


def test_one_depth_draws_a_ranking_each_layer_named_under_its_point_in_its_colour():
    cells = make_cells(depths=(36,))  # layerscale scores highest, then layernorm, then rezero
    fig = depth_figure(cells, select_lr(cells, ["layer", "depth"]), dataset="digits", epochs="1")
    ax = fig.axes[0]
    labels = ax.get_xticklabels()
    assert [t.get_text() for t in labels] == ["layerscale", "layernorm", "rezero"]
    assert [to_hex(t.get_color()) for t in labels] == [layer_colour(t.get_text()) for t in labels]
    points = {c.get_label(): (c.lines[0].get_xdata()[0], c.lines[0].get_ydata()[0]) for c in ax.containers}
    assert [points[name][0] for name in ("layerscale", "layernorm", "rezero")] == [0.0, 1.0, 2.0]
    assert points["layerscale"][1] > points["layernorm"][1] > points["rezero"][1]
    assert "depth 36" in ax.get_title() and not fig.legends  # no diverged seed: the names are the legend
    # the leaderboard's order: a diverged seed scores 0, so 2 of 3 diverged ranks layerscale last, not first
    failing = cells.assign(status=lambda f: f["status"].mask((f["layer"] == "layerscale") & (f["seed"] > 0),
                                                             "diverged"))
    failing = add_scores(failing.assign(val_top1=failing["val_top1"].where(failing["status"] == "ok"),
                                        test_top1=failing["test_top1"].where(failing["status"] == "ok")))
    fig = depth_figure(failing, select_lr(failing, ["layer", "depth"]), dataset="digits", epochs="1")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["layernorm", "rezero", "layerscale"]


def test_one_depth_of_many_layers_gets_an_lr_panel_per_layer_with_the_baseline_behind_each():
    from normbench.report.plots import MAX_LAYERS_PER_PANEL

    layers = ["layernorm", *(f"custom{i}" for i in range(MAX_LAYERS_PER_PANEL))]
    cells = add_scores(pd.DataFrame([cell(layer, 36, lr, s, 50.0 + i + 10 * s) for i, layer in enumerate(layers)
                                     for lr in LRS for s in range(2)]))
    fig = lr_figure(cells, dataset="digits", epochs="1", order=layers)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == layers
    for ax, layer in zip(shown, layers, strict=True):
        assert [c.get_label() for c in ax.containers] == [layer]
        grey = [line for line in ax.get_lines() if to_hex(line.get_color()) == to_hex("0.7")]
        assert len(grey) == (0 if layer == "layernorm" else 1)  # layernorm's curve behind every other panel
    assert list(shown[1].containers[0].lines[0].get_ydata()) == pytest.approx([56.0] * 3)  # custom0: 51 and 61
    assert "grey: layernorm" in fig.get_suptitle()
    fig.canvas.draw()
    labelled = [ax.get_title() for ax in shown if any(t.get_visible() and t.get_text() for t in ax.get_xticklabels())]
    assert labelled == layers[-5:]  # 9 panels in rows of 5: the lowest of each column names the lrs
    tight = cells.assign(select=cells["select"] - 9.5 * cells["seed"])  # seeds 0.5 apart: an axis near 50-60
    fig = lr_figure(tight, dataset="digits", epochs="1", order=layers, references={"chance": 10.0, "top": 57.0})
    assert "dashed: top 57.0%" in fig.get_suptitle() and "off the axis: chance 10.0%" in fig.get_suptitle()


def test_accuracy_vs_lr_with_four_depths_is_a_readable_grid(tmp_path):
    from matplotlib.image import imread

    cells = make_cells()
    paths = write_plots(cells, select_lr(cells, ["layer", "depth"]), tmp_path, dataset="digits", epochs="1")
    height, width = imread(tmp_path / "accuracy_vs_lr.png").shape[:2]
    assert width / height <= 2.5 and 6.3 <= width / DPI <= 12.8, (width, height)  # inches: a page's width
    assert all(p.stat().st_size > 0 for p in paths)
    assert grid(4) == (2, 2) and grid(3) == (2, 2) and grid(6) == (2, 3) and grid(1) == (1, 1)


def test_a_diverged_seed_is_drawn_apart_not_averaged_in_as_zero():
    cells = add_scores(pd.DataFrame([cell("layernorm", 12, 1e-3, 0, 80.0), cell("layernorm", 12, 1e-3, 1, 90.0),
                                     cell("layernorm", 12, 1e-3, 2, 0.0, "diverged"),
                                     cell("layernorm", 12, 1e-2, 0, 99.0), cell("layernorm", 12, 1e-2, 1, 2.0)]))
    fig = lr_figure(cells, dataset="digits", epochs="1")
    ax = fig.axes[0]
    bars = ax.containers[0]
    assert list(bars.lines[0].get_ydata()) == [85.0, 50.5]  # the two seeds that trained, not (80 + 90 + 0) / 3
    for segments in bars.lines[2]:  # the CI: 50.5 +- 12.7 * 48.5 runs far past both ends, drawn within 0-100
        for (_, y0), (_, y1) in segments.get_segments():
            assert 0 <= y0 <= 100 and 0 <= y1 <= 100
    crosses = [line for line in ax.get_lines() if line.get_gid() == "diverged:layernorm"]
    assert [(list(x.get_xdata()), list(x.get_ydata()), x.get_marker()) for x in crosses] == [([1e-3], [0.0], "x")]
    assert "1" in [t.get_text() for t in ax.texts]  # the count of diverged seeds
    assert DIVERGED_LABEL in [t.get_text() for t in fig.legends[0].get_texts()]


def test_the_header_names_no_unset_value(write_suite):
    suite = load_suite(write_suite(train={"epochs": 1, "warmup_epochs": 0, "clip_grad": None, "lr": 0.0031623},
                                   matrix={"depth": [1], "layer": ["layernorm"]}))
    lines = recipe_lines(suite)
    assert not any("=None" in line for line in lines), lines
    assert "clip_grad=off" in lines[2] and "lr=0.00316" in lines[2]
    assert "img_size" not in lines[1] and "root" not in lines[3]


def test_every_figure_is_a_200_dpi_png_with_an_svg_twin(tmp_path):
    from PIL import Image

    cells = make_cells()
    for path in write_plots(cells, select_lr(cells, ["layer", "depth"]), tmp_path, dataset="digits", epochs="1"):
        assert round(Image.open(path).info["dpi"][0]) >= 200
        twin = path.with_suffix(".svg")
        assert twin.read_text().lstrip().startswith("<?xml") and "<svg" in twin.read_text()


def test_a_figure_the_cells_no_longer_draw_is_removed_not_left_stale(tmp_path):
    """An lr sensitivity needs two lrs the rows share: from one lr there is none, so a figure an earlier leaderboard
    of the folder drew (PNG and SVG) goes rather than stay beside a leaderboard that no longer links it."""
    from normbench.report.plots import write_lr_sensitivity

    cells = make_cells(depths=(6,))
    table = lr_sensitivity(cells, ["layer", "depth"], ["depth"])
    selected = select_lr(cells, ["layer", "depth"]).merge(table, on=["layer", "depth"])
    drawn = write_lr_sensitivity(selected, tmp_path, dataset="digits", table_keys=["depth"])
    assert drawn is not None and drawn.is_file() and drawn.with_suffix(".svg").is_file()
    one_lr = select_lr(cells[cells["lr"] == LRS[0]], ["layer", "depth"]).merge(
        lr_sensitivity(cells[cells["lr"] == LRS[0]], ["layer", "depth"], ["depth"]), on=["layer", "depth"])
    assert write_lr_sensitivity(one_lr, tmp_path, dataset="digits", table_keys=["depth"]) is None
    assert not drawn.exists() and not drawn.with_suffix(".svg").exists()


def test_accuracy_axes_fit_the_data_and_draw_chance_and_the_ceiling_as_references():
    from normbench.report.plots import accuracy_limits

    rows = pd.DataFrame({"mean": [82.0, 97.0], "low": [80.5, 95.0], "high": [84.0, 99.0]})
    assert accuracy_limits([rows]) == (75.0, 100.0)  # rows of 80-99 on 75-100, not squeezed into 0-100
    assert accuracy_limits([rows], {"chance": 10.0}) == (75.0, 100.0)  # chance far below: named, not drawn
    assert accuracy_limits([rows.assign(low=[60.0, 95.0])], {"chance": 50.0}) == (45.0, 100.0)  # near: drawn
    cells = make_cells(depths=(6, 12))
    fig = depth_figure(cells, select_lr(cells, ["layer", "depth"]), dataset="digits", epochs="1",
                       references={"chance": 10.0, "ceiling (MLP)": 97.8})
    ax = fig.axes[0]
    assert ax.get_ylim()[0] > 10  # fit to the data
    assert any("ceiling (MLP) 97.8%" in t.get_text() for t in ax.texts)  # drawn: within the axis
    assert "off the axis: chance 10.0%" in ax.get_title()  # named where the axis cannot show it


def test_the_lr_figure_plots_val_the_quantity_that_chooses():
    cells = make_cells(depths=(6,)).assign(select=lambda f: f["score"] - 30.0)  # val 30 points under test
    fig = lr_figure(cells, dataset="digits", epochs="1")
    means = fig.axes[0].containers[0].lines[0].get_ydata()
    selected = cells[cells["layer"] == "layernorm"].groupby("lr")["select"].mean()  # the first, sorted
    assert list(means) == pytest.approx(list(selected))


def test_the_lr_vs_depth_table_and_figure_show_the_selected_lr_and_the_span_tried(tmp_path):
    from normbench.report.plots import write_lr_vs_depth
    from normbench.report.stats import selecting
    from normbench.report.tables import lr_depth_table

    cells = make_cells(depths=(6, 12))
    selected = select_lr(cells, ["layer", "depth"])
    tried = selecting(cells).groupby(["layer", "depth"])["lr"].agg(["min", "max"])
    table = lr_depth_table(selected, tried, ["layer"]).set_index("layer")
    best = selected.set_index(["layer", "depth"])["lr"]
    assert table.loc["rezero", "depth 6"].startswith(lr_text(best[("rezero", 6)]))
    assert table.loc["rezero", "depth 6"].endswith(f"({lr_text(LRS[0])}–{lr_text(LRS[-1])})")
    path = write_lr_vs_depth(selected, cells, tmp_path, dataset="digits")
    assert path is not None and path.is_file() and path.with_suffix(".svg").is_file()
    assert write_lr_vs_depth(selected[selected["depth"] == 6], cells, tmp_path, dataset="digits") is None


def test_the_step_figure_is_drawn_when_only_the_budget_cells_set_an_epochs_column():
    # a suite with the 2x budget check writes an `epochs` column that is empty on every cell a row reports: the
    # republished converged folder lost its accuracy_vs_step figure to it (max of NaNs selected no cell)
    cells = make_cells(depths=(6, 12)).assign(epochs=math.nan)
    selected = select_lr(cells, ["layer", "depth"])
    history = pd.DataFrame([{"cell_id": c, "step": step, "val_top1": 50.0 + step}
                            for c in cells["cell_id"] for step in (10, 20)])
    fig = step_figure(history, selected_cells(cells, selected, ["layer", "depth"]), dataset="digits")
    assert fig is not None and set(_colours_by_label(fig)) >= set(LAYERS)
