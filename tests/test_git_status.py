"""The README's `normbench run SUITE` and `tune SUITE --out OUT`, run in a checkout, leave `git status` as it was:
the default output folder (runs/<suite>) is git-ignored, and nothing else (an MLflow store, a lock, a spool) lands
beside it. Publishing into results/ is an explicit `--out`. Cheap: the tiny suite in a throwaway repo that holds the
project's own .gitignore."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from normbench.cli import main
from tests.conftest import REPO, TINY


def _status(repo: Path) -> list[str]:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.splitlines()


def test_run_and_tune_with_their_defaults_leave_git_status_unchanged(tmp_path, monkeypatch, one_torch_thread):
    repo = tmp_path / "checkout"
    (repo / "suites").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shutil.copyfile(REPO / ".gitignore", repo / ".gitignore")
    suite = {**TINY, "name": "clean", "matrix": {**TINY["matrix"], "layer": ["layernorm"]},
             "tune": {"trials": 2, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}}
    (repo / "suites" / "clean.yaml").write_text(yaml.safe_dump(suite))
    before = _status(repo)
    monkeypatch.chdir(repo)
    assert main(["run", "suites/clean.yaml", "--quiet"]) == 0
    assert main(["tune", "suites/clean.yaml", "--set", "tune.trials=1", "--out", str(tmp_path / "tuned"),
                 "--quiet"]) == 0
    assert _status(repo) == before
    assert (repo / "runs" / "clean" / "ledger.journal").exists()  # it did write, where git does not look
