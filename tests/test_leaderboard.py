"""Leaderboard tables from cell frames: best lr by seed mean, lr robustness, diverged cells scored 0, and the tuned
table ordered by accuracy as a number."""

from __future__ import annotations

import pandas as pd

from normbench.leaderboard import layer_table, tuned_section


def cell(layer: str, lr: float, seed: int, top1: float, status: str = "ok") -> dict:
    return {"layer": layer, "depth": 12, "lr": lr, "seed": seed, "best_val_top1": top1, "status": status,
            "images_per_sec": 100.0, "params": 2_000_000,
            "score": 0.0 if status == "diverged" else top1}


def test_layer_table_picks_the_lr_with_the_best_seed_mean_and_counts_robust_lrs():
    cells = pd.DataFrame([
        cell("layernorm", 1e-3, 0, 80.0), cell("layernorm", 1e-3, 1, 82.0),   # mean 81
        cell("layernorm", 3e-3, 0, 90.0), cell("layernorm", 3e-3, 1, 70.0),   # mean 80: within 1 point
        cell("layernorm", 1e-2, 0, 95.0, "diverged"), cell("layernorm", 1e-2, 1, 60.0),  # a blow-up scores 0
        cell("rezero", 1e-3, 0, 85.0), cell("rezero", 1e-3, 1, 86.0),
    ])
    table = layer_table(cells, ["layer"]).set_index("layer")
    assert list(table.index) == ["rezero", "layernorm"]  # sorted by accuracy
    row = table.loc["layernorm"]
    assert row["best lr"] == "0.001" and row["val top-1 (%)"] == "81.00 ± 1.41"
    assert row["lr within 1pt"] == "2/3" and row["diverged"] == "1/6"
    assert table.loc["rezero", "params (M)"] == "2.000"


def test_tuned_table_sorts_by_accuracy_not_by_its_text():
    tuned = pd.DataFrame([
        {**cell("layernorm", 1e-3, 0, 9.5), "tuned_params": {"lr": 0.001}},
        {**cell("layerscale", 5e-3, 0, 85.125), "tuned_params": {"lr": 0.005}},
        {**cell("rezero", 2e-3, 0, 10.0), "tuned_params": {"lr": 0.002}},
    ])
    text = "\n".join(tuned_section(tuned))
    order = [text.index(f"| {layer} ") for layer in ("layerscale", "rezero", "layernorm")]
    assert order == sorted(order)
    assert "lr=0.005" in text and "| 85.12 " in text and "±" not in text  # one seed: no spread to show
