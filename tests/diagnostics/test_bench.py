"""`normbench bench`: the FLOP count, and that a tiny CPU run writes the expected files. Timings are not asserted:
a benchmark's numbers depend on the machine, its content does not."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from normbench.diagnostics import MISSION_LAYERS
from normbench.diagnostics.bench import COLUMNS, bench_table, run_bench, vit_forward_flops, vit_train_flops
from normbench.model.vit import NormbenchViT

TINY = {"img_size": 8, "patch_size": 4, "in_chans": 3, "num_classes": 10}


def test_forward_flops_match_hand_count() -> None:
    # 8x8 image, patch 4: 4 patches + class token -> T = 5; C = 64, MLP hidden 256, 10 classes
    qkv, attn, proj, mlp = 3 * 2 * 5 * 64 * 64, 2 * 2 * 5 * 5 * 64, 2 * 5 * 64 * 64, 2 * 2 * 5 * 64 * 256
    patch_embed, head = 2 * 4 * (3 * 4 * 4) * 64, 2 * 64 * 10
    assert (qkv, attn, proj, mlp, patch_embed, head) == (122880, 6400, 40960, 327680, 24576, 1280)
    assert vit_forward_flops(depth=1, dim=64, **TINY) == 497920 + 24576 + 1280
    assert vit_train_flops(batch=2, depth=1, dim=64, **TINY) == 3 * 2 * 523776


def test_forward_flops_match_torch_flop_counter() -> None:
    model = NormbenchViT(embed_dim=64, depth=2, num_heads=1, **TINY)
    # Attention as explicit matmuls: every torch counts those, while whether FlopCounterMode counts the fused CPU
    # attention kernel depends on the torch build (2.14.1 does not, 2.15.0 does). The count must hold either way.
    attentions = [module for module in model.modules() if hasattr(module, "fused_attn")]
    assert len(attentions) == 2
    for attention in attentions:
        attention.fused_attn = False
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(2, 3, 8, 8))
    assert counter.get_total_flops() == 2 * vit_forward_flops(depth=2, dim=64, **TINY)


def test_run_bench_tiny_cpu_writes_csv_and_md(tmp_path: Path, one_torch_thread: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    run_bench(depths=[1], dims=[64], batch_size=4, device="cpu", compile_mode="auto", out_dir=tmp_path,
              warmup=1, steps=1, op_iters=2, repeats=1)
    version = torch.__version__.split("+")[0]
    csv, md = tmp_path / f"bench-cpu-{version}.csv", tmp_path / f"bench-cpu-{version}.md"
    frame = pd.read_csv(csv).set_index("layer")

    assert list(frame.reset_index().columns) == COLUMNS
    assert list(frame.index) == list(MISSION_LAYERS)
    assert frame["vs_timm"].notna().to_dict() == {"layernorm": True, "rmsnorm": False, "learnable_scaler": False,
                                                  "layerscale": True, "rezero": False, "fixup": False}
    assert frame["gate_op_ms"].notna().to_dict() == {"layernorm": False, "rmsnorm": False, "learnable_scaler": False,
                                                     "layerscale": True, "rezero": True, "fixup": True}
    assert frame["mfu_pct"].isna().all()  # no known peak on CPU
    assert (frame[["op_ms", "layernorm_op_ms", "step_ms", "images_per_s", "tflops"]] > 0).all().all()
    assert (frame["depth"] == 1).all() and (frame["dim"] == 64).all() and (frame["batch"] == 4).all()

    text = md.read_text(encoding="utf-8")
    assert "torch " in text and "timm " in text and "Batch 4, compile off, amp off" in text
    assert text.splitlines()[2].startswith("machine: ") and "CPU (" in text  # report/machine.py's line, the CPU's
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(MISSION_LAYERS)  # header, rule, one row per layer
    assert all(f"| {layer} " in text for layer in MISSION_LAYERS)
    assert table[0] in capsys.readouterr().out  # the table is printed too


def test_bench_table_rounds_each_column_and_leaves_missing_values_blank() -> None:
    frame = pd.DataFrame([{"layer": "rezero", "step_ms": 1.23456, "gate_op_ms": 0.123456789, "vs_timm": math.nan}])
    _, rule, row = bench_table(frame).splitlines()
    assert rule.startswith("|---")  # the reports' one markdown format (report.tables.markdown_table)
    assert [cell.strip() for cell in row.strip("|").split("|")] == ["rezero", "1.23", "0.1235", ""]


def test_a_bench_cut_short_keeps_the_rows_it_measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the GPU first-contact script runs the bench under a time limit: rows finished before the limit must be on disk
    calls: list[str] = []

    def row(layer: str, depth: int, dim: int, *args: object) -> dict[str, object]:
        calls.append(layer)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what SIGINT from `timeout -s INT` raises
        return {"layer": layer, "depth": depth, "dim": dim, "step_ms": 1.0}

    monkeypatch.setattr("normbench.diagnostics.bench.bench_row", row)
    with pytest.raises(KeyboardInterrupt):
        run_bench(layers=["layernorm", "rmsnorm"], depths=[1], dims=[16], device="cpu", out_dir=tmp_path)
    frame = pd.read_csv(tmp_path / f"bench-cpu-{torch.__version__.split('+')[0]}.csv")
    assert list(frame["layer"]) == ["layernorm"] and frame["step_ms"].tolist() == [1.0]


def test_by_default_bench_writes_to_the_git_ignored_runs_folder_not_over_committed_results(monkeypatch) -> None:
    import inspect

    from normbench import cli
    from normbench.diagnostics import bench
    from tests.conftest import REPO

    called = {}
    monkeypatch.setattr(bench, "run_bench", lambda **kwargs: called.update(kwargs))
    assert cli.main(["bench"]) == 0 and called["out_dir"] == Path("runs")
    assert inspect.signature(run_bench).parameters["out_dir"].default == Path("runs")
    assert "/runs/" in (REPO / ".gitignore").read_text().splitlines()
