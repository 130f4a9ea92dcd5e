"""`normbench bench SUITE --fuse 1 2` (diagnostics/fuse_bench.py): each row timed unfused and as fused groups, its
cells per hour from the suite's epochs, written as fuse-<device>-<torch>.csv/.md; a row the fusion rules refuse is
named and left out."""

from __future__ import annotations

import pandas as pd
import pytest

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.diagnostics import fuse_bench


def test_bench_fuse_writes_cells_per_hour_for_each_group_size(write_suite, tmp_path, capsys):
    suite = write_suite(train={"epochs": 5, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
                        matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3, 3e-3], "seed": [0]})
    assert main(["bench", str(suite), "--fuse", "2", "1", "--repeats", "1", "--device", "cpu",
                 "--out", str(tmp_path)]) == 0
    [csv] = tmp_path.glob("fuse-cpu-*.csv")
    assert csv.name.count(".") >= 3  # fuse-cpu-2.14.1.csv: the version's own dots survive
    frame = pd.read_csv(csv)
    assert frame["group"].tolist() == ["unfused", "1", "2"]
    alone = frame.loc[0, "epoch_s"]
    for _, row in frame.iloc[1:].iterrows():
        k = int(row["group"])
        assert abs(row["speedup_vs_unfused"] - k * alone / row["epoch_s"]) < 1e-9
        assert abs(row["cells_per_hour"] - 3600 * k / (row["epoch_s"] * 5)) < 1e-6
    assert "| layernorm" in csv.with_suffix(".md").read_text()


def test_a_row_the_rules_refuse_is_named_and_left_out(write_suite, tmp_path, capsys):
    suite = write_suite(train={"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 25},
                        matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]})
    assert main(["bench", str(suite), "--fuse", "2", "--repeats", "1", "--device", "cpu", "--out", str(tmp_path)]) == 0
    assert "layernorm at depth 1 is not fused (per-block telemetry" in capsys.readouterr().err
    [csv] = tmp_path.glob("fuse-cpu-*.csv")
    assert pd.read_csv(csv).empty


def test_a_bench_interrupted_in_its_second_row_keeps_the_first_rows_figures(write_suite, tmp_path, monkeypatch):
    suite = write_suite(train={"epochs": 5, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
                        matrix={"depth": [1], "layer": ["layernorm", "rmsnorm"], "lr": [1e-3], "seed": [0]})
    timed = fuse_bench.train_group

    def interrupted_on_rmsnorm(cells, dev):  # noqa: ANN001, ANN202 - train_group's own signature
        if cells[0].model.layer == "rmsnorm":
            raise KeyboardInterrupt  # the stage's `timeout -s INT` mid-row
        return timed(cells, dev)

    monkeypatch.setattr(fuse_bench, "train_group", interrupted_on_rmsnorm)
    with pytest.raises(KeyboardInterrupt):
        fuse_bench.fuse_bench(load_suite(suite), tmp_path, [1, 2], device="cpu", repeats=1)
    [csv] = tmp_path.glob("fuse-cpu-*.csv")
    assert pd.read_csv(csv)["layer"].tolist() == ["layernorm"] * 3
