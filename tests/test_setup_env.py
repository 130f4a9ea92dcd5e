"""scripts/setup-env.sh: a .venv linked from another checkout is never re-pointed at this one by an editable install
(it would silently run this checkout's code wherever the other one runs `normbench`, its background sweep included)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkout_with_a_venv_at(tmp_path: Path, linked: bool) -> tuple[Path, Path]:
    """A checkout holding setup-env.sh and a pyproject.toml newer than any stamp, whose .venv is its own or a link
    to another checkout's; the environment's python only records that it ran (as pip would have)."""
    other = tmp_path / "other" / ".venv"
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copyfile(REPO / "scripts" / "setup-env.sh", repo / "scripts" / "setup-env.sh")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    venv = other if linked else repo / ".venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/usr/bin/env bash\necho \"$@\" >> {tmp_path / 'ran'}\n")
    python.chmod(0o755)
    if linked:
        (repo / ".venv").symlink_to(other)
    return repo, tmp_path / "ran"


def test_a_venv_linked_from_another_checkout_is_refused_before_pip_runs(tmp_path):
    repo, ran = checkout_with_a_venv_at(tmp_path, linked=True)
    proc = subprocess.run(["bash", "scripts/setup-env.sh"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "another checkout's environment" in proc.stderr and "rm .venv && bash scripts/setup-env.sh" in proc.stderr
    assert not ran.exists()  # nothing was installed into the other checkout's environment


def test_its_own_venv_installs(tmp_path):
    repo, ran = checkout_with_a_venv_at(tmp_path, linked=False)
    proc = subprocess.run(["bash", "scripts/setup-env.sh"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "-m pip install -q -e .[test]" in ran.read_text() and (repo / ".venv" / ".normbench-installed").exists()
