"""Leaderboard tables from cell frames: sorted by the test score at the val-selected lr, best marked, CI and n
instead of ±, edge flags, claims with numbers, the tuned table ordered by accuracy as a number."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from normbench.contracts.selection import add_scores
from normbench.report.claims import check_claims
from normbench.report.stats import select_lr
from normbench.report.tables import all_depths_table, claims_table, layer_table, tuned_table, window_text


def cell(layer: str, lr: float, seed: int, val: float, test: float, status: str = "ok", depth: int = 12) -> dict:
    ok = status == "ok"
    return {"layer": layer, "depth": depth, "lr": lr, "seed": seed, "status": status, "best_val_top1": val,
            "val_top1": val if ok else math.nan, "test_top1": test if ok else math.nan,
            "images_per_sec": 100.0, "params": 2_000_000}


def frame() -> pd.DataFrame:
    return add_scores(pd.DataFrame([
        cell("layernorm", 1e-3, 0, 80.0, 79.0), cell("layernorm", 1e-3, 1, 82.0, 81.0),
        cell("layernorm", 3e-3, 0, 79.0, 90.0), cell("layernorm", 3e-3, 1, 80.0, 92.0),
        cell("layernorm", 1e-2, 0, 0.0, 0.0, "diverged"), cell("layernorm", 1e-2, 1, 60.0, 60.0),
        cell("rezero", 1e-3, 0, 84.0, 85.0), cell("rezero", 1e-3, 1, 86.0, 86.0),
    ]))


def test_layer_table_sorts_by_test_at_the_val_selected_lr_and_marks_the_best():
    selected = select_lr(frame(), ["layer", "depth"])
    table = layer_table(selected, ["layer"], {("layernorm",): 2e6, ("rezero",): 2e6}).set_index("layer")
    assert list(table.index) == ["rezero", "layernorm"] and table.loc["rezero", "rank"] == "1 (tied)"
    assert layer_table(selected, ["layer"], separated=True)["rank"].tolist() == ["1 ★", "2"]
    row = table.loc["layernorm"]
    # val picks 1e-3 (81.0 vs 79.5), although test would favour 3e-3 (91.0)
    assert row["lr (val-selected)"] == "0.001" and row["test top-1 (%)"] == "80.00" and row["n"] == "2 select"
    assert row["95% CI"] == "[67.29, 92.71]"  # 80 ± 12.7062 * sqrt(2) / sqrt(2)
    assert row["edge"] == "edge (lowest lr)" and row["failed"] == "1/6 (17%)" and row["params (M)"] == "2.000"
    assert row["lr window"] == "0.001–0.003 (x3)"  # 3e-3's test mean 91.0 lies inside [67.29, 92.71]
    assert table.loc["rezero", "edge"] == "edge (one lr)"
    assert "±" not in table.to_string()
    assert window_text(3e-3, 3e-3) == "0.003 (x1)"


def test_all_depths_table_is_sorted_by_score_not_by_name():
    cells = add_scores(pd.DataFrame([cell("aaa", 1e-3, 0, 50.0, 50.0, depth=d) for d in (6, 12)]
                                    + [cell("zzz", 1e-3, 0, 90.0, 90.0, depth=d) for d in (6, 12)]))
    table = all_depths_table(select_lr(cells, ["layer", "depth"]), ["layer"])
    assert table["layer"].tolist() == ["zzz", "aaa"] and table.iloc[0]["depth 6"] == "90.00 — e"


def test_claims_table_states_the_verdict_with_its_numbers():
    cells = add_scores(pd.DataFrame([cell("layerscale", 1e-3, s, 70, 70 + d, depth=36) for s, d in enumerate([5, 6, 7])]
                                    + [cell("layernorm", 1e-3, s, 70, 70, depth=36) for s in range(3)]))
    claims = check_claims(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"],
                          [{"layer": "layerscale", "beats": "layernorm", "depth": 36, "by": 3.4}])
    row = claims_table(claims).iloc[0]
    assert row["claim"] == "layerscale beats layernorm at depth 36 by more than 3.4"
    assert (row["difference (points)"], row["95% CI"], row["verdict"]) == ("+6.00", "[3.52, 8.48]", "supported")


def test_tuned_table_sorts_by_accuracy_not_by_its_text():
    tuned = pd.DataFrame([
        {**cell("layernorm", 1e-3, 0, 9.0, 9.5), "tuned_params": {"lr": 0.001}},
        {**cell("layerscale", 5e-3, 0, 85.0, 85.125), "tuned_params": {"lr": 0.005}},
        {**cell("rezero", 2e-3, 0, 10.0, 10.0), "tuned_params": {"lr": 0.002}},
    ])
    table = tuned_table(tuned)
    assert table["layer"].tolist() == ["layerscale", "rezero", "layernorm"]
    row = table.iloc[0]
    assert row["best config (val)"] == "lr=0.005" and row["test top-1 (%)"] == "85.12" and row["95% CI"] == "—"


def test_leaderboard_of_a_run_has_the_protocol_sections(write_suite, tmp_path: Path):
    from normbench.cli import main

    claim = {"layer": "layerscale", "beats": "layernorm", "depth": 1}
    path = write_suite(matrix={"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3], "seed": [0, 1]},
                       claims=[claim])
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    board = (out / "leaderboard.md").read_text()
    for text in ("splits (train/val/test images): 1077/360/360", "seeds: selection [0, 1]; report none",
                 "score = test top-1", "- regime: AdamW, 1 epochs = 4 optimizer steps", "data ceiling (simple models",
                 "train: epochs=1, batch_size=256, optimizer=adamw", "label_smoothing=0.1",  # defaults shown too
                 "95% CI", "## paired comparison with layernorm", "## claims",
                 "layerscale beats layernorm at depth 1", "## throughput"):
        assert text in board, text
    assert "=None" not in board  # unset recipe values (img_size, root) are left out of the header
    assert "## all depths" not in board  # one depth: it would repeat the final-accuracy table
    assert "edge (one lr)" in board or "no signal (best lr at chance)" in board  # one epoch of a tiny model
    csv = pd.read_csv(out / "results.csv")
    assert {"val_top1", "test_top1", "best_val_epoch", "train_size", "val_size", "test_size"} <= set(csv)
    assert csv["test_top1"].notna().all() and (csv["test_size"] == 360).all()


def test_the_header_says_where_the_cells_trained_and_counts_those_that_did_not_say():
    from normbench.report.header import trained_on

    cells = frame().assign(device=["NVIDIA H200"] * 2 + ["CPU (x86_64, 2 cores)"] * 5 + [None],
                           torch_version=["2.11.0+cu130"] * 2 + ["2.14.1"] * 5 + [None])
    assert trained_on(cells) == ["- trained on: CPU (x86_64, 2 cores) (5 cells, torch 2.14.1), NVIDIA H200 (2 cells, "
                                 "torch 2.11.0+cu130); 1 recorded none"]
    assert trained_on(frame()) == []  # a ledger from before results named their device: no line, nothing guessed
    threads = cells.assign(torch_threads=["1", "1"] + ["2", "2/1", "2", "", "2"] + [None])
    assert trained_on(threads) == ["- trained on: CPU (x86_64, 2 cores) (5 cells, torch 2.14.1, 1-2 threads), NVIDIA "
                                   "H200 (2 cells, torch 2.11.0+cu130, 1 thread); 1 recorded none"]
