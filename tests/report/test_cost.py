"""The leaderboard's cost section and throughput table: a cost file's numbers rounded once, and never a median
pooled over devices."""

from __future__ import annotations

import pandas as pd

from normbench.report.cost import cost_sections
from normbench.report.tables import throughput_table


def test_each_cost_file_is_a_table_sorted_by_depth_then_cost_rounded_once(tmp_path):
    pd.DataFrame({
        "layer": ["layernorm", "mhc", "rezero", "layernorm"], "depth": [36, 36, 36, 12],
        "step_ms": [100.04999, 520.0, 80.0, 40.0], "images_per_s": [640.0, 123.0, 800.0, 1600.0],
        "step_vs_baseline": [1.0, 5.2, 0.79999, 1.0], "memory_mib": [10.0, 38.0, 9.0, 4.0],
        "memory": "train-step estimate", "mem_vs_baseline": [1.0, 3.8, 0.9, 1.0], "params": [1_802_000] * 4,
        "batch": 64, "baseline": "layernorm", "device": "cpu", "torch": "2.14.1", "timm": "1.0.31", "suite": "modern",
    }).to_csv(tmp_path / "cost-cpu-2.14.1.csv", index=False)
    lines = "\n".join(cost_sections(tmp_path, "modern")).splitlines()
    assert lines[0].startswith("## cost per train step at this suite's shape (cpu, torch 2.14.1, batch 64")
    assert "[cost-cpu-2.14.1.md](cost-cpu-2.14.1.md)" in lines[0]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| layer ")]
    assert [row.split("|")[1].strip() for row in rows] == ["layernorm", "rezero", "layernorm", "mhc"]
    assert "| 100.0 " in rows[2] and "| 0.80x " in rows[1] and "| 5.20x " in rows[3]


def test_a_folder_without_a_cost_file_has_no_cost_section(tmp_path):
    assert cost_sections(tmp_path) == []


def test_throughput_is_split_by_device_when_cells_ran_on_several():
    cells = pd.DataFrame({"layer": ["a", "a", "a", "b"], "depth": [36] * 4,
                          "device": ["cpu", "cpu", "NVIDIA H200", "cpu"],
                          "images_per_sec": [100.0, 120.0, 500.0, 90.0]})
    table = throughput_table(cells, ["layer"])
    assert list(table.columns) == ["layer", "depth 36, NVIDIA H200", "depth 36, cpu"]
    assert table.set_index("layer").loc["a"].tolist() == ["500", "110"]
    one = throughput_table(cells[cells["device"] == "cpu"], ["layer"])
    assert list(one.columns) == ["layer", "depth 36"]
    unnamed = throughput_table(cells.assign(device=["cpu", None, "", "cpu"]), ["layer"])  # older cells name none
    assert list(unnamed.columns) == ["layer", "depth 36"] and unnamed.set_index("layer").loc["a"].tolist() == ["120"]


def test_throughput_keeps_fused_cells_apart_from_cells_trained_alone():
    """A fused member trains at its group's rate (train/fused.py): pooled with cells alone, a row's median would
    read as neither."""
    cells = pd.DataFrame({"layer": ["a", "a", "a", "b"], "depth": [36] * 4, "device": ["NVIDIA H200"] * 4,
                          "fused_group": [1, 8, 8, 1], "images_per_sec": [900.0, 300.0, 340.0, 800.0]})
    table = throughput_table(cells, ["layer"]).set_index("layer")
    assert list(table.columns) == ["depth 36, fused", "depth 36, unfused"]
    assert table.loc["a"].tolist() == ["320", "900"] and table.loc["b"].tolist() == ["", "800"]
    alone = throughput_table(cells.assign(fused_group=1), ["layer"])
    assert list(alone.columns) == ["layer", "depth 36"]  # a folder without fused cells: as before


def test_a_cost_file_of_another_suite_or_an_older_layout_is_named_and_not_shown(tmp_path):
    row = {"layer": "layernorm", "depth": 36, "step_ms": 100.0, "step_vs_baseline": 1.0, "memory_mib": 10.0,
           "memory": "train-step estimate", "mem_vs_baseline": 1.0, "params": 1_802_000, "batch": 64,
           "baseline": "layernorm", "device": "cpu", "torch": "2.14.1"}
    pd.DataFrame([{**row, "suite": "smoke"}]).to_csv(tmp_path / "cost-cpu-2.14.1.csv", index=False)
    pd.DataFrame([{k: v for k, v in row.items() if k != "params"}]).to_csv(tmp_path / "cost-gpu.csv", index=False)
    text = "\n".join(cost_sections(tmp_path, "modern"))
    assert "## cost" not in text and "| layernorm " not in text
    assert "cost-cpu-2.14.1.csv was measured for suite smoke: not shown" in text
    assert "cost-gpu.csv lacks params: not shown" in text and f"normbench bench SUITE --out {tmp_path}" in text
