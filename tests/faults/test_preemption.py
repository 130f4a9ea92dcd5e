"""A long cell survives preemption (issue 39): its worker SIGKILLed after two checkpoints, or SIGTERMed inside an
epoch, the cell resumes on the next run, or on another machine sharing --checkpoint-dir, and ends exactly as the
uninterrupted cell ends (results.csv row and history); a torn checkpoint, or one of another recipe, is set aside with
one warning line and the cell starts over; a finished cell leaves no checkpoint behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.sweep.checkpoints import CheckpointFolder
from normbench.train.checkpoint import Keeper, recipe_of
from normbench.train.loop import train_cell
from tests.conftest import TINY
from tests.faults.helpers import assert_invariants, finish, normbench, trials, wait_for

CELL = "depth=2,layer=layerscale,lr=0.001,seed=0"
# ~0.7 s an epoch on one core: long enough to stop it between checkpoints; 0.001 min checkpoints every epoch
TRAIN = {"epochs": 8, "batch_size": 16, "warmup_epochs": 0, "checkpoint_minutes": 0.001}
MATRIX = {"depth": [2], "layer": ["layerscale"], "lr": [1e-3], "seed": [0]}
BOOKKEEPING = ["seconds", "images_per_sec", "trial"]  # wall time, and the ledger's number of the attempt


def _suite(write_suite, **train) -> Path:
    return write_suite(train={**TRAIN, **train}, matrix=MATRIX)


def _results(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.read_csv(out / "results.csv").drop(columns=BOOKKEEPING),
            pd.read_csv(out / "history.csv"))


def _checkpoint_record(out: Path) -> dict | None:
    return next((t.user_attrs.get("checkpoint") for t in trials(out, "tiny") if t.state == TrialState.RUNNING), None)


def _no_checkpoint_left(*folders: Path) -> None:
    for folder in folders:
        assert not [p for p in folder.rglob("*") if p.is_file() and "checkpoint" in p.name], list(folder.rglob("*"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[pd.DataFrame, pd.DataFrame]:
    folder = tmp_path_factory.mktemp("uninterrupted")
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "train": TRAIN, "matrix": MATRIX}))
    code, err = finish(normbench("run", path, "--out", folder / "out", "--quiet"))
    assert code == 0, err
    return _results(folder / "out")


def _assert_equal(out: Path, uninterrupted) -> None:
    row, history = _results(out)
    pd.testing.assert_frame_equal(row, uninterrupted[0])
    pd.testing.assert_frame_equal(history, uninterrupted[1])


def test_sigkill_after_the_second_checkpoint_resumes_and_ends_as_the_uninterrupted_cell(write_suite, tmp_path,
                                                                                     uninterrupted):
    path, out = _suite(write_suite), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet")
    wait_for(lambda: (_checkpoint_record(out) or {}).get("epoch", 0) >= 2, timeout=240, step=0.05,
             what="the second checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    epoch = _checkpoint_record(out)["epoch"]
    assert epoch < TRAIN["epochs"]
    code, err = finish(normbench("run", path, "--out", out, "--quiet"))
    assert code == 0, err
    resumed = [line for line in err.splitlines() if "resumes from its checkpoint" in line]
    assert len(resumed) == 1 and f"cell {CELL} resumes from its checkpoint at epoch " in resumed[0], err
    assert int(resumed[0].split("at epoch ")[1].split()[0].rstrip(":,")) >= epoch  # the newest, or a later one
    _assert_equal(out, uninterrupted)
    assert_invariants(out, "tiny", [CELL])
    _no_checkpoint_left(out)


def test_sigterm_inside_an_epoch_checkpoints_releases_the_claim_and_exits_143(write_suite, tmp_path, uninterrupted):
    path, out = _suite(write_suite), tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet")
    wait_for(lambda: (_checkpoint_record(out) or {}).get("epoch", 0) >= 1, timeout=240, step=0.05,
             what="the first checkpoint")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, timeout=120)
    assert code == 143, err
    states = [t.state for t in trials(out, "tiny")]
    assert TrialState.RUNNING not in states and TrialState.WAITING in states  # released, queued again
    queued = next(t for t in trials(out, "tiny") if t.state == TrialState.WAITING)
    record = queued.user_attrs["checkpoint"]  # the queued copy carries the record on
    boundary = _last_reported_step(out)
    assert record["step"] >= boundary  # no older than the last epoch's end the worker reported
    if record["batch"]:  # the signal landed inside an epoch (the usual case): the batches trained since count
        assert record["step"] > boundary
    code, err = finish(normbench("run", path, "--out", out, "--quiet"))
    assert code == 0, err
    assert f"at epoch {record['epoch']}" in err, err
    _assert_equal(out, uninterrupted)
    assert_invariants(out, "tiny", [CELL])
    _no_checkpoint_left(out)


def _last_reported_step(out: Path) -> int:
    """The step of the last epoch's end the stopped attempt reported to its trial (optuna's intermediate values)."""
    return max((step for t in trials(out, "tiny") for step in t.intermediate_values), default=0)


def test_a_second_worker_on_another_host_resumes_the_cell_from_the_shared_checkpoint_dir(write_suite, tmp_path,
                                                                                      uninterrupted):
    path, out, shared = _suite(write_suite), tmp_path / "out", tmp_path / "shared"
    first = normbench("run", path, "--out", out, "--quiet", "--checkpoint-dir", shared,
                      env={"NORMBENCH_HOST": "node-a"})
    wait_for(lambda: (_checkpoint_record(out) or {}).get("epoch", 0) >= 2, timeout=240, step=0.05,
             what="node-a's second checkpoint")
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert _checkpoint_record(out)["host"] == "node-a"
    assert (shared / "run_tiny" / CELL / "checkpoint.pt").is_file() and not (out / "checkpoints").exists()
    code, err = finish(normbench("worker", path, "--out", out, "--quiet", "--checkpoint-dir", shared,
                                 env={"NORMBENCH_HOST": "node-b"}))
    assert code == 0, err
    assert f"cell {CELL} resumes from its checkpoint at epoch" in err, err
    done = next(t for t in trials(out, "tiny") if t.state == TrialState.COMPLETE)
    assert done.user_attrs["worker_host"] == "node-b"
    assert main(["leaderboard", str(out)]) == 0
    _assert_equal(out, uninterrupted)
    _no_checkpoint_left(shared)


@pytest.mark.parametrize("damage", ["truncated", "another recipe"])
def test_a_damaged_or_foreign_checkpoint_is_set_aside_with_one_warning_and_the_cell_starts_over(
        damage, write_suite, tmp_path, capsys, one_torch_thread, uninterrupted):
    path, out = _suite(write_suite), tmp_path / "out"
    config = load_suite(path).cells()[0].config
    target = CheckpointFolder.of(out, None).cell("run:tiny", CELL) / "checkpoint.pt"
    other = config if damage == "truncated" else load_suite(
        write_suite("other", train={**TRAIN, "weight_decay": 0.0}, matrix=MATRIX)).cells()[0].config
    short = type(other.train)(**{**vars(other.train), "epochs": 2})
    train_cell(type(other)(model=other.model, train=short, data=other.data), device="cpu",
               keeper=Keeper(path=target, recipe=recipe_of(other), interval_s=1e-9))
    assert target.is_file()
    if damage == "truncated":
        target.write_bytes(target.read_bytes()[:1000])
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("normbench: warning:")]
    assert len(warnings) == 1 and "set aside as checkpoint.pt.set-aside, the cell starts over" in warnings[0], err
    assert ("unreadable" if damage == "truncated" else "another recipe") in warnings[0]
    assert "resumes" not in err
    _assert_equal(out, uninterrupted)
    _no_checkpoint_left(out)  # the set-aside file too, once the cell is finished
