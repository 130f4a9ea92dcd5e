"""`--fuse` resolved (sweep/fuse_plan.py): `auto` stays 1 on a CPU; on CUDA it follows the newest fuse bench of the
device (the fastest configuration's workers and compile, the smallest group that beat a cell alone), else the
documented constants; and the groups a suite forms: the modern suite (unchanged) fuses groups of 8 on CUDA, which
the dry run shows without a GPU (`--device cuda`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.sweep.fuse_plan import CPU_AUTO, CUDA_CONSTANTS, FusePlan, chunks, plan_for, stage_groups

MODERN = Path(__file__).resolve().parents[2] / "suites" / "depth-sweep-digits-modern.yaml"


def test_auto_is_unfused_on_a_cpu_and_an_explicit_size_is_taken_as_given(tmp_path):
    assert plan_for("auto", "cpu", measured=tmp_path) == CPU_AUTO and CPU_AUTO.k == 1
    assert plan_for(4, "cuda", measured=tmp_path).k == 4 and plan_for("8", "cpu", measured=tmp_path).k == 8


def test_auto_on_cuda_takes_the_constants_without_a_measurement_of_this_gpu(tmp_path):
    assert plan_for("auto", "cuda", "nvidia-h200", measured=tmp_path) == CUDA_CONSTANTS
    assert CUDA_CONSTANTS.k >= 8 and CUDA_CONSTANTS.workers >= 1


def bench_rows(rows: list[tuple[str, int, int, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"suite": "s", "layer": "layernorm", "depth": 36, "config": c, "group": k, "workers": w,
                          "speedup": x, "cells_per_hour": 100 * x} for c, k, w, x in rows])


def test_auto_on_cuda_follows_the_newest_fuse_bench_of_that_gpu(tmp_path):
    folder = tmp_path / "fuse"
    folder.mkdir()
    bench_rows([("alone", 1, 1, 1.0), ("workers", 1, 14, 3.0), ("fused", 2, 1, 0.8), ("fused", 4, 1, 1.6),
                ("fused", 8, 1, 2.5), ("fused+compiled", 8, 1, 6.0), ("workers x fused", 8, 4, 9.0)]).to_csv(
        folder / "fuse-nvidia-h200-2.14.1.csv", index=False)
    plan = plan_for("auto", "cuda", "nvidia-h200", measured=tmp_path)
    assert (plan.workers, plan.min_k, plan.compile, plan.graphs) == (4, 4, False, False)
    assert "fuse-nvidia-h200-2.14.1.csv" in plan.source and "workers x fused" in plan.source
    bench_rows([("alone", 1, 1, 1.0), ("workers", 1, 14, 3.0), ("fused", 3, 1, 1.1),
                ("fused+compiled", 8, 1, 12.0)]).to_csv(folder / "fuse-nvidia-h200-2.15.0.csv", index=False)
    plan = plan_for("auto", "cuda", "nvidia-h200", measured=tmp_path)  # the newer file wins
    assert (plan.workers, plan.min_k, plan.compile) == (1, 3, True)
    assert plan_for("auto", "cuda", "nvidia-h100", measured=tmp_path) == CUDA_CONSTANTS  # another GPU's says nothing


def test_when_unfused_workers_measured_faster_auto_does_not_fuse(tmp_path):
    (tmp_path / "fuse").mkdir()
    bench_rows([("alone", 1, 1, 1.0), ("workers", 1, 14, 5.0), ("fused", 8, 1, 2.0)]).to_csv(
        tmp_path / "fuse" / "fuse-nvidia-h200-2.14.1.csv", index=False)
    assert plan_for("auto", "cuda", "nvidia-h200", measured=tmp_path).k == 1


def test_a_row_forms_groups_of_at_most_k_and_a_remainder_under_min_k_trains_alone():
    row = [{"layer": "a", "lr": lr, "seed": s} for lr in (1, 2) for s in range(5)]  # 10 cells of one row
    assert chunks(row, FusePlan(k=4, min_k=3)) == [4, 4, 1, 1]
    assert chunks(row, FusePlan(k=16)) == [10]
    assert chunks(row + [{"layer": "b", "lr": 1, "seed": 0}], FusePlan(k=16)) == [10, 1]
    assert chunks(row, FusePlan(k=1)) == [1] * 10


def test_the_modern_suite_forms_groups_of_8_on_cuda_and_its_report_stage_joins_the_2x_cells(tmp_path):
    suite = load_suite(MODERN)
    groups = stage_groups(suite, plan_for("auto", "cuda", measured=tmp_path))
    rows = len(suite.layers())
    assert groups["selection"] == [8] * rows  # 2 lrs x 4 selection seeds: each row one group of 8
    assert groups["report"] == [6] * rows  # 4 report seeds + 2 of them at 2x epochs
    assert stage_groups(suite, plan_for("auto", "cpu"))["selection"] == [1] * (8 * rows)


def test_the_dry_run_shows_the_groups_a_cuda_machine_would_form(capsys, tmp_path):
    assert main(["run", str(MODERN), "--dry-run", "--device", "cuda", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"selection: {len(load_suite(MODERN).layers())} of 8" in out.splitlines()[-1], out.splitlines()[-1]
    assert not (tmp_path / "out").exists()
    assert main(["run", str(MODERN), "--dry-run", "--device", "cpu", "--out", str(tmp_path / "out")]) == 0
    assert "fused groups" not in capsys.readouterr().out  # auto on a CPU: unfused, nothing to show


def test_a_compile_that_costs_more_than_it_saves_over_a_whole_cell_is_not_chosen(tmp_path):
    """40 epochs: the compiled group's epoch is twice as fast, but its compile (in its first epoch) outweighs that."""
    (tmp_path / "fuse").mkdir()
    row = {"suite": "s", "layer": "layernorm", "depth": 36}
    pd.DataFrame([{**row, "config": c, "group": k, "workers": 1, "epoch_s": e, "first_s": f,
                   "cells_per_hour": 3600 * k / (e * 40), "speedup": (3600 * k / (e * 40)) / 9.0}
                  for c, k, e, f in (("alone", 1, 10.0, 15.0), ("fused", 8, 20.0, 30.0),
                                     ("fused+compiled", 8, 10.0, 900.0))]).to_csv(
        tmp_path / "fuse" / "fuse-nvidia-h200-2.14.1.csv", index=False)
    plan = plan_for("auto", "cuda", "nvidia-h200", measured=tmp_path)
    assert plan.k == 16 and plan.compile is False and "fused fastest" in plan.source
