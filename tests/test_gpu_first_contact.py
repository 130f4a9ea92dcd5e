"""scripts/gpu-first-contact.sh parses, and on a machine without CUDA refuses before doing anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-first-contact.sh"


def test_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_refuses_without_cuda_and_writes_nothing(tmp_path: Path) -> None:
    # a copy in an empty repository layout, so a wrongly started run could not touch the real results/
    (tmp_path / "scripts").mkdir()
    copy = tmp_path / "scripts" / SCRIPT.name
    copy.write_text(SCRIPT.read_text())
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(copy)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no CUDA device visible" in done.stderr and "GPU machine" in done.stderr
    assert not (tmp_path / "results").exists()
