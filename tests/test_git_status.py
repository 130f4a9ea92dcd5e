"""Every command the README lists, run with its defaults in a throwaway copy of this checkout in the README's order,
leaves `git status` empty: a default output folder is git-ignored (runs/), and nothing else (an MLflow store, a lock,
a spool, a probe's report, a checkpoint) lands where git looks. Publishing into results/ is an explicit `--out`, and
what a published folder's run keeps besides its results (checkpoints, kept weights) is ignored there too.

The copy holds today's working tree (its .gitignore included), committed, so `git status` starts empty. Tiny suites
stand in for the README's (suites/smoke.yaml, suites/depth36.yaml, SUITE), tiny shapes for bench and probe; the
commands that need a server are run up to it (`ui`'s server is not started) or on the journal (`worker`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from normbench.cli import main
from tests.conftest import REPO, TINY

TUNE = {"trials": 1, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}
CLAIM = {"layer": "layerscale", "beats": "layernorm", "depth": 1}
SUITES = {  # the copy's stand-ins: a few seconds each on a CPU
    "smoke": {**TINY, "name": "smoke", "baseline": "layernorm", "claims": [CLAIM], "tune": TUNE},
    "depth36": {**TINY, "name": "depth36", "train": {**TINY["train"], "epochs": 2}},  # compared with smoke
    "tiny": {**TINY, "matrix": {**TINY["matrix"], "layer": ["layernorm"], "lr": [1e-3, 3e-3]},
             "bracket_max_steps": 1},
}
SMALL_BENCH = ["--layers", "layernorm", "--repeats", "1"]

# the README's lines (comments dropped) -> what runs in the copy: argv for `normbench`, a shell command, or None for
# a program that only serves (optuna-dashboard reads the ledger and writes nothing)
README_COMMANDS = {
    "bash scripts/run-smoke.sh": "bash scripts/run-smoke.sh",
    "bash scripts/test.sh": "bash scripts/test.sh tests/contracts/test_names.py",
    "normbench layers": ["layers"],
    "normbench run suites/depth36.yaml": ["run", "suites/depth36.yaml", "--quiet"],
    "normbench run suites/smoke.yaml --dry-run": ["run", "suites/smoke.yaml", "--dry-run"],
    "normbench run SUITE --workers 4": ["run", "suites/tiny.yaml", "--workers", "2", "--quiet"],
    "normbench run SUITE --bracket": ["run", "suites/tiny.yaml", "--bracket", "--quiet"],
    "normbench run SUITE --fuse 16": ["run", "suites/tiny.yaml", "--fuse", "16", "--quiet"],
    "normbench tune suites/smoke.yaml": ["tune", "suites/smoke.yaml", "--quiet"],
    "normbench worker SUITE --storage postgresql://user@db/normbench": ["worker", "suites/tiny.yaml", "--quiet"],
    "normbench leaderboard results/smoke": ["leaderboard", "results/smoke"],
    "normbench compare results/A results/B": ["compare", "results/smoke", "runs/depth36"],
    "normbench sync results/smoke": ["sync", "results/smoke"],
    "normbench ui results/smoke": ["ui", "results/smoke", "--no-browser"],
    "normbench ledger repair results/smoke": ["ledger", "repair", "results/smoke"],
    "optuna-dashboard results/smoke/ledger.journal": None,
    "normbench bench --depth 12 24 36 --dim 192 384": ["bench", "--depth", "1", "--dim", "16", "--batch-size", "8",
                                                       *SMALL_BENCH],
    "normbench bench SUITE": ["bench", "suites/tiny.yaml", *SMALL_BENCH],
    "normbench probe --depth 6 36": ["probe", "--depth", "1", "--dim", "16", "--layers", "layernorm",
                                     "--batch-size", "8"],
}


def readme_commands(text: str) -> list[str]:
    """The README's setup commands ('## Two commands') and its command list ('## Commands'), comments dropped."""
    lines = []
    for heading in ("## Two commands", "## Commands"):
        section = text.split(f"\n{heading}", 1)[1].split("\n## ", 1)[0]
        block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
        lines += [" ".join(line.partition("#")[0].split()) for line in block.splitlines() if line.strip()]
    return lines


def _status(repo: Path) -> list[str]:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.splitlines()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def throwaway_copy(to: Path) -> Path:
    """This checkout's files as git sees them (tracked, and untracked but not ignored: today's working tree) in a
    new repository, with a .venv that is this one's (setup-env.sh finds it installed)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in names:
        source = REPO / name
        if name and source.is_file() and not name.startswith("results/in-progress/"):  # a sweep writes there
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, to / name)
    (to / ".venv").mkdir()
    for entry in (REPO / ".venv").iterdir():
        if not entry.name.startswith("."):
            (to / ".venv" / entry.name).symlink_to(entry)
    (to / ".venv" / ".normbench-installed").touch()  # newer than the copied pyproject.toml: nothing to install
    return to


def _run(repo: Path, readme: str, command: str | list[str] | None) -> None:
    if isinstance(command, str):
        proc = subprocess.run(command.split(), cwd=repo, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert proc.returncode == 0, f"{readme}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    elif command is not None:
        assert main(command) == 0, readme


def test_every_readme_command_with_its_defaults_leaves_git_status_empty(tmp_path, monkeypatch, one_torch_thread):
    import sys

    import normbench.tracking.ui as ui

    assert readme_commands((REPO / "README.md").read_text()) == list(README_COMMANDS), \
        "the README's commands changed: say here how this test runs each one"
    repo = throwaway_copy(tmp_path / "checkout")
    for name, suite in SUITES.items():
        (repo / "suites" / f"{name}.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    monkeypatch.chdir(repo)
    # everything `ui` does but serve: it syncs, tags the view and starts (then stops) a stand-in for its server
    monkeypatch.setattr(ui, "serve", lambda *args, **kwargs: 0)
    stand_in = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(ui, "server_command", lambda *args, **kwargs: (stand_in, dict(os.environ)))
    shutil.rmtree(repo / "results" / "smoke")  # published from the stand-in, as the real one was from the real suite
    assert main(["run", "suites/smoke.yaml", "--out", "results/smoke", "--quiet"]) == 0
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the checkout as it is")
    assert _status(repo) == []

    dirtied = {}
    for readme, command in README_COMMANDS.items():
        _run(repo, readme, command)
        if _status(repo):
            changed = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True).stdout
            dirtied[readme] = [*_status(repo), changed[:2000]]  # what changed, to see why
            _git(repo, "add", "-A")  # what the next command adds is its own
            _git(repo, "commit", "-q", "-m", readme)
    assert dirtied == {}, f"commands that changed `git status`: {dirtied}"
    written = {p.relative_to(repo / "runs").parts[0] for p in (repo / "runs").rglob("*") if p.is_file()}
    assert {"smoke", "depth36", "tiny"} <= written  # they did write: where git does not look
    assert list((repo / "runs").glob("probe-*.md")) and list((repo / "runs").glob("bench-*.md"))


@pytest.mark.parametrize("checkpoints", [None, "results/shared-checkpoints"])
def test_a_published_runs_checkpoints_and_kept_weights_are_git_ignored(tmp_path, monkeypatch, one_torch_thread,
                                                                       checkpoints):
    """`--out results/NAME` publishes the results; the checkpoints and kept weights beside them (OUT/checkpoints,
    or a --checkpoint-dir inside results/) are a cache, hundreds of MB on a real model, never committed."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    shutil.copyfile(REPO / ".gitignore", repo / ".gitignore")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    suite = {**TINY, "name": "kept", "matrix": {**TINY["matrix"], "layer": ["layernorm"]},
             "train": {**TINY["train"], "checkpoint_minutes": 1e-6, "keep_weights": "final"}}
    (repo / "kept.yaml").write_text(yaml.safe_dump(suite))
    monkeypatch.chdir(repo)
    where = ["--checkpoint-dir", checkpoints] if checkpoints else []
    assert main(["run", "kept.yaml", "--out", "results/kept", "--quiet", *where]) == 0
    cache = repo / (checkpoints or "results/kept/checkpoints")
    weights = list(cache.rglob("weights.safetensors"))
    assert len(weights) == 1, list(cache.rglob("*"))  # <study>/<cell>/weights.safetensors
    # a finished cell's checkpoint is removed; a stopped one's stays beside it, with a set-aside and a half-written one
    for name in ("checkpoint.pt", "checkpoint.pt.set-aside", ".checkpoint.pt.123.tmp", ".weights.safetensors.9.tmp"):
        (weights[0].parent / name).write_bytes(b"state")
    shown = [line[3:] for line in _status(repo)]
    assert "results/kept/leaderboard.md" in shown  # what is published shows, to be committed
    assert not [p for p in shown if p.startswith(str(cache.relative_to(repo))) or p.endswith((".pt", ".safetensors"))]
