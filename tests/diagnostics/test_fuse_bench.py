"""`normbench bench SUITE --fuse 1 4` (diagnostics/fuse_bench.py): each row's own cells (no cell repeated) timed alone,
in worker processes, fused and as fused workers, from a steady-state epoch (the second of two: the build, the first
epoch and the test pass outside it), their cells per hour from the suite's epochs and their model FLOPs utilisation
against the device's peak (n/a on a CPU), written as fuse-<device>-<torch>.csv/.md; a row the fusion rules refuse
is named and left out."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest
from torch import nn

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.diagnostics import fuse_bench

TRAIN = {"epochs": 5, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0}


def test_bench_fuse_reports_each_configurations_cells_per_hour_from_the_suites_own_cells(write_suite, tmp_path):
    suite = write_suite(train=TRAIN, matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3, 3e-3],
                                             "seed": [0, 1]})
    assert main(["bench", str(suite), "--fuse", "16", "1", "--repeats", "1", "--device", "cpu", "--workers", "2",
                 "2", "--out", str(tmp_path)]) == 0
    [csv] = tmp_path.glob("fuse-cpu-*.csv")
    assert csv.name.count(".") >= 3  # fuse-cpu-2.14.1.csv: the version's own dots survive
    frame = pd.read_csv(csv)
    # the row's 4 cells, K capped at them (16 -> 4: no cell repeated); no compiled row on a CPU unless asked
    assert list(zip(frame["config"], frame["group"], frame["workers"], strict=True)) == [
        ("alone", 1, 1), ("workers", 1, 2), ("fused", 4, 1), ("workers x fused", 4, 2)]
    alone = frame.loc[0, "cells_per_hour"]
    for _, row in frame.iterrows():
        assert row["cells_per_hour"] == pytest.approx(3600 * row["workers"] * row["group"] / (row["epoch_s"] * 5))
        assert row["speedup"] == pytest.approx(row["cells_per_hour"] / alone)
        assert row["step_gflop"] > 0 and math.isnan(row["mfu"])  # a CPU has no peak in the table
    text = csv.with_suffix(".md").read_text()
    assert "| layernorm" in text and "n/a" in text


def test_a_steady_epoch_leaves_out_the_build_the_first_epoch_and_the_test_pass(write_suite, monkeypatch):
    from normbench.train import fused, loop

    slow = 4.0
    cells = fuse_bench.row_cells(load_suite(write_suite(train=TRAIN, matrix={
        "depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0, 1]})), 1, "layernorm")
    build, evaluate = loop.build_fit, fused._Group.evaluate

    def slow_build(*args, **kwargs):  # noqa: ANN202
        time.sleep(slow)
        return build(*args, **kwargs)

    def slow_test(group, split="val"):  # noqa: ANN001, ANN202
        if split == "test":
            time.sleep(slow)
        return evaluate(group, split)

    monkeypatch.setattr(fused, "build_fit", slow_build)
    monkeypatch.setattr(fused._Group, "evaluate", slow_test)
    started = time.perf_counter()
    seconds, _, _ = fuse_bench.steady_epoch(cells, "cpu")
    assert time.perf_counter() - started > 3 * slow  # two builds and the test pass did run
    assert seconds < slow  # none of them inside the epoch timed


def test_a_row_the_rules_refuse_is_named_and_left_out(write_suite, tmp_path, capsys):
    suite = write_suite(train={**TRAIN, "epochs": 1, "mixup": 0.8},
                        matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0, 1]})
    assert main(["bench", str(suite), "--fuse", "2", "--repeats", "1", "--device", "cpu", "--out", str(tmp_path)]) == 0
    assert "layernorm at depth 1 is not fused (mixup/cutmix" in capsys.readouterr().err
    [csv] = tmp_path.glob("fuse-cpu-*.csv")
    assert pd.read_csv(csv).empty


def test_a_bench_interrupted_in_its_second_row_keeps_the_first_rows_figures(write_suite, tmp_path, monkeypatch):
    suite = write_suite(train=TRAIN, matrix={"depth": [1], "layer": ["layernorm", "rmsnorm"], "lr": [1e-3, 3e-3],
                                             "seed": [0]})
    timed = fuse_bench.train_group

    def interrupted_on_rmsnorm(cells, dev, **kwargs):  # noqa: ANN001, ANN003, ANN202 - train_group's signature
        if cells[0].model.layer == "rmsnorm":
            raise KeyboardInterrupt  # the stage's `timeout -s INT` mid-row
        return timed(cells, dev, **kwargs)

    monkeypatch.setattr(fuse_bench, "train_group", interrupted_on_rmsnorm)
    with pytest.raises(KeyboardInterrupt):
        fuse_bench.fuse_bench(load_suite(suite), tmp_path, [1, 2], device="cpu", repeats=1, workers=1,
                              fused_workers=1)
    [csv] = tmp_path.glob("fuse-cpu-*.csv")
    assert pd.read_csv(csv)[["layer", "config"]].values.tolist() == [["layernorm", "alone"], ["layernorm", "fused"]]


def test_model_flops_of_a_train_step_are_three_forward_passes_of_its_matrices(write_suite):
    """A ViT's FLOPs are its linear layers' (2 per multiply-add forward, twice that backward) plus attention's."""
    from normbench.train.loop import build_fit

    [cell] = fuse_bench.row_cells(load_suite(write_suite(train=TRAIN, matrix={
        "depth": [2], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]})), 2, "layernorm")
    flops, steps = fuse_bench.step_flops(cell)
    model = build_fit(cell, "cpu", None, None).model
    tokens = model.patch_embed.num_patches + 1
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    matrices = 6 * linear * tokens * cell.train.batch_size
    assert matrices < flops < 1.5 * matrices and steps >= 1


@pytest.mark.parametrize(("name", "peak"), [("NVIDIA H200", 989.4e12), ("NVIDIA H100 80GB HBM3", 989.4e12),
                                            ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
                                            ("CPU (x86_64, 2 cores)", None), ("NVIDIA A100-SXM4-80GB", None)])
def test_the_peak_is_the_devices_dense_bf16_one_or_none(name, peak):
    assert fuse_bench.peak_flops(name) == peak


def test_a_bench_worker_count_below_one_is_one_line_and_creates_nothing(write_suite, tmp_path, capsys):
    suite = write_suite(train=TRAIN)
    assert main(["bench", str(suite), "--fuse", "2", "--workers", "0", "2", "--out", str(tmp_path / "out")]) == 2
    assert "bench --workers 0 2: give 1 or more processes for each" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
