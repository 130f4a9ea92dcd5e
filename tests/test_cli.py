"""The command line's own inputs go through the suite's checks: `--device`, `--set KEY=VALUE`, and a CIFAR download
without network, each refused in one line before anything is created."""

from __future__ import annotations

import argparse
import os
import subprocess
import urllib.request
from pathlib import Path
from urllib.error import URLError

import pytest
import yaml

from normbench.cli import build_parser, main
from normbench.contracts.suite import load_suite
from tests.conftest import REPO
from tests.contracts.test_suite import run_cli


@pytest.mark.parametrize("command", ["run", "tune", "worker"])
def test_a_bad_device_flag_is_one_line_like_the_suite_key(write_suite, capsys, tmp_path, command):
    out = tmp_path / "out"
    code, err = run_cli(capsys, command, str(write_suite()), "--out", str(out), "--device", "tpu")
    assert code == 2 and err.strip() == "normbench: error: --device: expected auto, cpu, cuda or cuda:N, got 'tpu'"
    assert not out.exists()


@pytest.mark.parametrize("overrides, expected", [
    (["train.epocs=2"], ["--set train.epocs=2", "`train.epocs` is not a train key", "did you mean `epochs`?"]),
    (["dataset.rot=~/data"], ["`dataset.rot` is not a dataset key", "did you mean `root`?"]),
    (["trian.epochs=2"], ["unknown key `trian`", "did you mean `train`?"]),
    (["train=2"], ["`train` is a section", "--set train.epochs=VALUE"]),
    (["train.epochs"], ["--set 'train.epochs': expected KEY=VALUE"]),
    (["name.x=1"], ["`name` takes a value, not keys"]),
    (["train.epochs=ten"], ["with --set train.epochs=ten: train.epochs: expected int, got 'ten'"]),
    (["train.epochs=2.5"], ["train.epochs: expected int, got 2.5"]),
    (["dataset.download=maybe"], ["dataset.download: expected bool, got 'maybe'"]),
    (["train.warmup_epochs=1"], ["train.warmup_epochs: 1 is not below train.epochs 1"]),
    (["train.optimizer=adamx"], ["did you mean `adamax`?"]),
    (["matrix.lr=[]"], ["matrix.lr: needs at least one value"]),
    (["train.lr=3e-3"], ["`lr` is a matrix axis of this suite", "--set matrix.lr=[3e-3]"]),
    (["epochs=2"], ["unknown key `epochs` (`epochs` is a train key: --set train.epochs=2)"]),
    (["embed_dim=32"], ["unknown key `embed_dim` (`embed_dim` is a model key: --set model.embed_dim=32)"]),
    (["root=~/data"], ["(`root` is a dataset key: --set dataset.root=~/data)"]),
])
def test_bad_overrides_are_refused_like_the_files_keys(write_suite, capsys, tmp_path, overrides, expected):
    path, out = write_suite(), tmp_path / "out"
    code, err = run_cli(capsys, "run", str(path), "--out", str(out), *[a for o in overrides for a in ("--set", o)])
    assert code == 2 and str(path) in err and len(err.strip().splitlines()) == 1
    for fragment in expected:
        assert fragment in err
    assert not out.exists()


def test_overrides_are_yaml_values_and_change_the_recipe(write_suite):
    path = write_suite()
    plain = load_suite(path)
    suite = load_suite(path, ["train.epochs=3", "train.weight_decay=3e-3", "dataset.root=~/data",
                              "dataset.download=true", "matrix.seed=[0, 1]", "model.embed_dim=32", "matrix.depth=[2]"])
    assert suite.train["epochs"] == 3 and suite.train["weight_decay"] == 3e-3 and suite.model["embed_dim"] == 32
    assert suite.dataset.root == "~/data" and suite.dataset.download is True
    assert suite.matrix["seed"] == [0, 1] and len(suite.cells()) == 2 * len(plain.cells())
    assert suite.recipe_hash() != plain.recipe_hash()
    assert load_suite(path, ["train.epochs=1"]).recipe_hash() == plain.recipe_hash()  # the file's own value


def test_a_run_with_overrides_saves_them_and_resumes_only_with_them(write_suite, capsys, tmp_path, one_torch_thread):
    path, out = write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}), tmp_path / "out"
    sets = ["--set", "train.epochs=2", "--set", "matrix.lr=[2e-3]"]
    assert main(["run", str(path), "--out", str(out), "--quiet", "--device", "cpu", *sets]) == 0
    saved = yaml.safe_load((out / "suite.yaml").read_text())
    assert saved["train"]["epochs"] == 2 and saved["matrix"]["lr"] == [2e-3]  # the record of what ran
    assert load_suite(out / "suite.yaml").recipe_hash() == load_suite(path, sets[1::2]).recipe_hash()
    assert path.read_text() == write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}
                                           ).read_text()  # the file itself is not changed
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--dry-run", *sets]) == 0
    assert "1 cells, 1 finished" in capsys.readouterr().out
    code, err = run_cli(capsys, "run", str(path), "--out", str(out), "--quiet", "--device", "cpu")
    assert code == 2 and "changed since the cells in this ledger" in err  # as if the file had been edited back


def test_a_cifar_download_without_network_names_the_url_and_the_manual_fix(write_suite, capsys, tmp_path,
                                                                          monkeypatch):
    def offline(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    root, out = tmp_path / "data" / "cifar", tmp_path / "out"
    path = write_suite(dataset={"name": "cifar10", "root": str(root), "download": True})
    code, err = run_cli(capsys, "run", str(path), "--out", str(out), "--device", "cpu")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for fragment in ("download of https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz failed",
                     "name resolution", "no network", "cifar-10-python.tar.gz", str(root)):
        assert fragment in err
    assert "free space" not in err
    assert not (tmp_path / "data").exists() and not out.exists()  # no empty data folder left behind


def test_a_bad_max_attempts_setting_is_refused_before_the_folder_exists(write_suite, tmp_path, monkeypatch, capsys):
    from normbench import cli

    monkeypatch.setenv("NORMBENCH_MAX_ATTEMPTS", "0")
    out = tmp_path / "out"
    assert cli.main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 2
    assert "NORMBENCH_MAX_ATTEMPTS" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("argv", [["run", "suites/smoke.yaml"], ["tune", "suites/smoke.yaml", "--set", "tune.trials=1"],
                                  ["worker", "suites/smoke.yaml"], ["bench", "suites/smoke.yaml"]])
def test_without_out_a_suite_command_writes_to_the_git_ignored_runs_folder_never_to_results(argv, monkeypatch):
    """Publishing is an explicit `--out results/NAME`: the README's `normbench tune suites/smoke.yaml` once added
    studies to the committed results/smoke/ledger.journal."""
    from normbench.diagnostics import suite_cost
    from normbench.sweep import suite_run
    from normbench.sweep.worker import WorkSummary

    written: list[Path] = []

    def record(suite, out, **_):  # what each command would train or measure into
        written.append(Path(out))
        return WorkSummary()

    monkeypatch.chdir(REPO)
    for module, name in ((suite_run, "run_suite"), (suite_run, "join_suite"), (suite_cost, "suite_cost")):
        monkeypatch.setattr(module, name, record)
    assert main(argv) == 0
    assert written == [Path("runs/smoke")]
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/smoke/ledger.journal"], cwd=REPO, check=False)
    assert ignored.returncode == 0, "runs/ is no longer git-ignored: a default run would show in `git status`"


@pytest.mark.parametrize("command", ["run", "tune"])
@pytest.mark.parametrize("workers", ["0", "-1"])
def test_workers_below_one_is_one_line_not_the_usage(write_suite, capsys, tmp_path, command, workers):
    code, err = run_cli(capsys, command, str(write_suite()), "--out", str(tmp_path / "out"), "--workers", workers)
    assert code == 2 and err == (f"normbench: error: --workers {workers}: must be 1 or more (leave it out for one per "
                                 "GPU, 1 on CPU)\n")
    assert not (tmp_path / "out").exists()


def test_every_option_of_every_command_says_what_it_does():
    """`--device`, `--compile`, `--host` and `--port` once showed no help: a flag with no words is a guess."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    silent = [f"{name} {action.option_strings or action.dest}" for name, command in commands.items()
              for action in command._actions if not action.help]
    assert silent == []


def test_ui_without_a_folder_opens_the_suite_run_last_or_names_what_to_pass(tmp_path, monkeypatch, capsys):
    import normbench.tracking.ui as ui
    from tests.faults.helpers import free_port
    from tests.tracking.ledgers import write_ledger

    monkeypatch.chdir(tmp_path)
    code, err = run_cli(capsys, "ui", "--no-browser")
    assert code == 2 and err.count("\n") == 1 and "pass one, e.g. `normbench ui results/smoke`" in err
    assert not list(tmp_path.iterdir())
    opened = []
    monkeypatch.setattr(ui, "run_ui", lambda uri, out, *args, **kwargs: opened.append(out) or 0)
    write_ledger(tmp_path / "runs" / "older")
    write_ledger(tmp_path / "runs" / "newer")
    os.utime(tmp_path / "runs" / "older" / "ledger.journal", (1e9, 1e9))
    code, err = run_cli(capsys, "ui", "--no-browser", "--port", str(free_port()))
    assert code == 0 and opened == [Path("runs/newer")]
    assert "normbench: ui of runs/newer, the output folder under runs/ whose ledger changed last" in err
