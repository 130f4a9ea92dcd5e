"""scripts/gpu-first-contact.sh and scripts/gpu-sweep.sh parse, and without CUDA refuse before doing anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-first-contact.sh"


def copy_script(root: Path, script: Path) -> Path:
    """`script` and the stage library it sources (scripts/lib/) copied into an empty repository layout at `root`, so a
    wrongly started run could not touch the real results/."""
    (root / "scripts" / "lib").mkdir(parents=True)
    for lib in (script.parent / "lib").iterdir():
        (root / "scripts" / "lib" / lib.name).write_text(lib.read_text())
    copy = root / "scripts" / script.name
    copy.write_text(script.read_text())
    return copy


def test_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_refuses_without_cuda_and_writes_nothing(tmp_path: Path) -> None:
    copy = copy_script(tmp_path, SCRIPT)
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(copy)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no CUDA device visible" in done.stderr and "GPU machine" in done.stderr
    assert not (tmp_path / "results").exists()


SWEEP = SCRIPT.parent / "gpu-sweep.sh"


def test_the_sweep_script_parses_and_asks_for_its_arguments() -> None:
    subprocess.run(["bash", "-n", str(SWEEP)], check=True)
    done = subprocess.run(["bash", str(SWEEP)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage: bash scripts/gpu-sweep.sh SUITE OUT" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_the_sweep_script_refuses_without_cuda_and_names_the_cpu_command(tmp_path: Path) -> None:
    copy = copy_script(tmp_path, SWEEP)
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(copy), "suites/smoke.yaml", "runs/smoke"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "no CUDA device visible" in done.stderr and "normbench run suites/smoke.yaml --out runs/smoke" in done.stderr
    assert not (tmp_path / "runs").exists()


FAKE_PYTHON = """#!/usr/bin/env bash
# answers as a CUDA machine would: the device check passes, the slug is fake-gpu, `-m normbench bench` writes a figure
case "$*" in
    *cuda.is_available*) exit 0 ;;
    *device_slug*) echo fake-gpu ;;
    *"-m normbench bench"*) mkdir -p results && echo "| row |" > results/bench-fake-gpu.md ;;
    *) echo "fake python: $*" ;;
esac
"""


def test_with_out_set_each_stage_s_figures_are_packed_into_it(tmp_path: Path) -> None:
    """A device lease brings back only $OUT: the figures a stage wrote must be there even if a later stage is cut."""
    copy = copy_script(tmp_path, SCRIPT)
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "old-figure.md").write_text("from before this run")
    os.utime(tmp_path / "results" / "old-figure.md", (0, 0))
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHON": str(fake), "OUT": str(out), "STAGES": "bench"}
    done = subprocess.run(["bash", str(copy)], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = subprocess.run(["tar", "-tzf", str(out / "gpu-first-contact.tgz")], capture_output=True, text=True,
                            check=True).stdout.split()
    assert sorted(listed) == ["results/bench-fake-gpu.md", "results/gpu-first-contact-fake-gpu.log"]
