"""A device the machine does not have is an error up front, not a failure in every cell; a CPU's name says its host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from normbench.cli import main
from normbench.errors import NormbenchError
from normbench.train.device import device_name, resolve_device


def gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_is_cpu_without_a_gpu_and_cuda_with_one(monkeypatch):
    gpus(monkeypatch, 0)
    assert resolve_device("auto") == torch.device("cpu")
    gpus(monkeypatch, 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.parametrize(("count", "device"), [(0, "cuda"), (0, "cuda:0"), (2, "cuda:2")])
def test_a_missing_gpu_names_the_fix(monkeypatch, count, device):
    gpus(monkeypatch, count)
    with pytest.raises(NormbenchError, match=f"device {device}: this machine sees {count} CUDA"):
        resolve_device(device)


def test_run_on_a_missing_gpu_exits_2_before_training(write_suite, tmp_path, monkeypatch, capsys):
    gpus(monkeypatch, 0)
    out = tmp_path / "out"
    assert main(["run", str(write_suite()), "--out", str(out), "--device", "cuda", "--quiet"]) == 2
    assert "--device cpu" in capsys.readouterr().err
    assert not (out / "ledger.journal").exists() and not (out / "mlflow.db").exists()


def test_a_cpu_is_named_with_the_kernels_it_runs_and_its_cpuid_model():
    """Two CPU hosts of one class run other kernels and round otherwise (docs/protocol.md, "Devices"): the name a cell
    records says which, from torch's dispatch level and /proc/cpuinfo's first processor."""
    name = device_name("cpu")
    assert name.startswith("CPU (") and name.endswith(f", {os.cpu_count()} cores)")
    assert f", {torch.backends.cpu.get_cpu_capability()}" in name
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        block = cpuinfo.read_text().split("\n\n")[0]
        first = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in block.splitlines() if ":" in line)}
        assert f" {first['cpu family']}/{first['model']}, " in name
