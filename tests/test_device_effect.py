"""scripts/device_effect.py: cells trained on two devices paired by cell id, and their differences set against what
a change of seed gives a difference of two cells (√2 times the seed-to-seed sd, not the sd itself)."""

from __future__ import annotations

import importlib.util
import math

import pandas as pd

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("device_effect", REPO / "scripts" / "device_effect.py")
device_effect = importlib.util.module_from_spec(spec)
spec.loader.exec_module(device_effect)


def cells(device: str, vals: list[float], seeds: list[int]) -> pd.DataFrame:
    return pd.DataFrame([{"cell_id": f"layer=ln,lr=0.001,seed={s}", "layer": "ln", "lr": 1e-3, "seed": s,
                          "device": device, "val_top1": v, "test_top1": v, "role": "select"}
                         for s, v in zip(seeds, vals, strict=True)])


def test_only_cells_of_one_id_on_two_device_classes_are_paired():
    gpu = cells("NVIDIA H200", [80.0, 70.0, 60.0], [0, 1, 2])
    cpu = pd.concat([cells("CPU (x86_64, 2 cores)", [82.0, 69.0], [0, 1]), cells("NVIDIA H100", [1.0], [2])])
    pairs = device_effect.paired_cells(gpu, cpu)
    assert pairs["seed"].tolist() == [0, 1]  # seed 2 trained on two GPUs: one class
    assert (pairs["val_top1_b"] - pairs["val_top1_a"]).tolist() == [2.0, -1.0]


def test_the_differences_are_set_against_the_sd_of_a_difference_of_two_seeds():
    pairs = device_effect.paired_cells(cells("NVIDIA H200", [80.0, 70.0, 60.0], [0, 1, 2]),
                                       cells("CPU", [82.0, 69.0, 63.0], [0, 1, 2]))
    spread = {"val_top1": 10.0, "test_top1": 10.0}
    row = device_effect.summary(pairs, spread).set_index("metric").loc["val_top1"]
    assert row["seed-to-seed sd (same row and lr, one device)"] == "10.00"
    assert row["sd of a difference of two seeds (√2 × that)"] == f"{math.sqrt(2) * 10:.2f}" == "14.14"
    assert row["cells"] == 3 and row["mean difference (b - a)"] == "+1.33"
    assert row["median |difference|"] == "2.00" and row["mean |difference|"] == "2.00"  # |2|, |-1|, |3|


def test_the_per_cell_table_prints_each_lr_as_it_is():
    pairs = device_effect.paired_cells(cells("NVIDIA H200", [80.0], [0]), cells("CPU", [82.5], [0]))
    shown = device_effect.as_text(pairs.assign(lr=[3.16e-3]))
    assert shown["lr"].tolist() == ["0.00316"] and shown["val_top1_b"].tolist() == ["82.50"]


def test_the_published_device_effect_regenerates_from_its_two_folders(tmp_path, monkeypatch):
    """results/device-effect-digits.md is what the script writes from the two published ledgers, byte for byte."""
    monkeypatch.chdir(REPO)  # the command the file names, run where it says
    out = tmp_path / "device-effect-digits.md"
    assert device_effect.main(["results/depth-sweep-digits-modern", "results/device-effect-digits",
                               "--out", str(out)]) == 0
    assert out.read_text() == (REPO / "results" / "device-effect-digits.md").read_text()
