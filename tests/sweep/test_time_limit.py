"""`--time-limit`: no cell starts that this host's pace says would end past the limit; the rest wait in the ledger,
untouched, for the next run, and the run says so with exit code 75."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import pytest
from optuna.trial import TrialState

from normbench import cli
from normbench.contracts.results import CellResult
from normbench.contracts.suite import load_suite
from normbench.errors import NormbenchError
from normbench.store.attempts import ATTEMPTS
from normbench.store.ledger import Ledger, newest_trials
from normbench.sweep import worker
from normbench.sweep.checkpoints import CHECKPOINT_ATTR, CheckpointFolder
from normbench.sweep.launch import LOCAL_WORKER, worker_command
from normbench.sweep.pace import Pace, shape_of
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_jobs
from normbench.sweep.time_limit import TIME_LIMITED, TimeLimit, parse_duration, turn_seconds
from normbench.tracking.tracker import Tracker
from normbench.train.device import device_name

LAYERS = ["layernorm", "layerscale", "rezero"]
CELL_SECONDS = 100.0  # what each stand-in cell says it took


def hundred_second_cell(config, device, on_epoch=None, dist=None, **_):
    record = {"epoch": 0, "train_loss": 1.0, "val_top1": 50.0, "lr": 1e-3, "grad_norm": 1.0, "images_per_sec": 1.0,
              "step": 1, "images": 1}
    on_epoch(record)
    return CellResult(status="ok", best_val_top1=50.0, final_val_top1=50.0, val_top1=50.0, test_top1=math.nan,
                      best_val_epoch=0, train_size=1, val_size=1, test_size=1, num_classes=10, train_loss=1.0,
                      epochs_run=1, images_per_sec=1.0, params=1, seconds=CELL_SECONDS, history=[record],
                      device=device_name())


@pytest.mark.parametrize("text,seconds", [("2h30m", 9000), ("90m", 5400), ("45s", 45), ("1d", 86400),
                                          ("1.5h", 5400), ("02:30:00", 9000), ("30:00", 1800), (" 10M ", 600)])
def test_durations_read_with_their_unit_or_as_slurm_writes_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["90", "0m", "", "2 hours", "h", "-5m", "1:2:3:4"])
def test_a_duration_without_a_unit_or_not_positive_is_refused_with_the_forms_it_takes(text):
    with pytest.raises(NormbenchError, match="2h30m, 90m, 45s"):
        parse_duration(text)


def test_a_turn_starts_unless_its_known_cost_overruns_and_nothing_starts_past_the_limit():
    limit = TimeLimit.after(600)
    assert limit.refusal(None) == ""  # nothing finished here yet: cost unknown, it starts
    assert limit.refusal(300.0) == ""
    assert "about 12 min" in limit.refusal(720.0) and "10 min are left" in limit.refusal(720.0)
    assert TimeLimit(time.time() - 1).refusal(None) == "the time limit has passed"


def states(out) -> list[TrialState]:
    """Each cell's state (its newest trial: a cell given back is failed and queued again as a new trial); none may
    carry an attempt (those count towards failed for good)."""
    ledger = Ledger(None, out)
    trials = [t for s in ledger.storage.get_all_studies() for t in ledger.storage.get_all_trials(s._study_id)]
    assert not any(t.user_attrs.get(ATTEMPTS) for t in trials)
    return sorted((t.state for t in newest_trials(trials).values()), key=lambda state: state.name)


def test_the_cell_that_would_overrun_waits_untouched_for_the_next_run(write_suite, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(worker, "train_cell", hundred_second_cell)
    path = write_suite(matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    args = ["run", str(path), "--out", str(out), "--quiet", "--device", "cpu", "--workers", "1"]
    # the first cell starts (no pace known yet) and takes 100 s here; at that pace the next does not fit in 60
    assert cli.main([*args, "--time-limit", "1m"]) == TIME_LIMITED
    assert states(out) == [TrialState.COMPLETE, TrialState.WAITING, TrialState.WAITING]  # given back
    err = capsys.readouterr().err
    assert "stopped at the time limit" in err and "about 2 min at this host's pace" in err, err
    assert f"--out {out} --dry-run` lists what is left" in err and (out / "leaderboard.md").is_file()
    assert cli.main(args) == 0  # no limit: the two that waited train, and nothing ran twice
    assert states(out) == [TrialState.COMPLETE] * 3


def test_local_workers_get_their_parents_limit_and_end_cleanly_where_a_lone_worker_says_75(write_suite, tmp_path,
                                                                                        monkeypatch, capsys):
    suite = load_suite(write_suite())
    stop_by = time.time() - 1.0
    command = worker_command(suite, tmp_path, storage=None, device="cpu", mode="run", stop_by=stop_by)
    parsed = cli.build_parser().parse_args(command[3:])  # past `python -m normbench`
    assert parsed.stop_by == stop_by  # the same instant, not a duration counted again from the worker's start
    args = ["worker", str(suite.path), "--out", str(tmp_path / "out"), "--device", "cpu", "--stop-by", repr(stop_by)]
    assert cli.main(args) == TIME_LIMITED  # past the limit nothing starts, though no pace is known here
    assert "stopped at the time limit: cell" in capsys.readouterr().err
    assert states(tmp_path / "out") == [TrialState.WAITING] * 2
    monkeypatch.setenv(LOCAL_WORKER, "1")  # a worker of `run --workers`: its parent says it and exits 75
    assert cli.main([*args, "--quiet"]) == 0


def test_a_worker_with_nothing_to_claim_leaves_at_the_limit_instead_of_waiting_for_its_peers(write_suite, tmp_path):
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}))
    here = Ledger(None, tmp_path)
    study = open_run_study(here, suite)
    here.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    peer = Ledger(None, tmp_path)
    assert peer.claim(peer.study(study.study_name)) is not None  # a live peer trains the only cell
    ended: list[worker.WorkSummary] = []
    stand_in = threading.Thread(daemon=True, target=lambda: ended.append(worker.work(
        run_jobs(suite, study, here), here, Tracker(tmp_path, suite.name), "cpu", Progress(total=1, quiet=True),
        suite.name, time_limit=TimeLimit(time.time() - 1))))
    stand_in.start()
    stand_in.join(timeout=20)  # without the limit it would poll until the peer finished
    assert ended and ended[0].time_limited == "the time limit has passed"
    peer.close()


def test_a_cell_counts_the_epochs_its_checkpoint_here_leaves_and_all_of_them_without_one(tmp_path):
    folder = CheckpointFolder(tmp_path / "checkpoints")
    axes = {"depth": 2, "layer": "layernorm", "lr": 1e-3, "seed": 0}
    config = SimpleNamespace(model=SimpleNamespace(depth=2), train=SimpleNamespace(epochs=40))
    job = SimpleNamespace(study=SimpleNamespace(study_name="report:wide"), cell_for=lambda claim: ("c0", {}, config))
    record = {"file": "elsewhere/checkpoint.pt", "epoch": 30, "step": 300, "batch": 0}
    claim = SimpleNamespace(trial=SimpleNamespace(user_attrs={"axes": axes, CHECKPOINT_ATTR: record}))
    pace = Pace(per_epoch={shape_of(axes): 10.0}, per_depth_epoch=5.0)
    assert turn_seconds(pace, job, [claim], folder) == 400.0  # the file is on another machine: all 40 epochs
    own = folder.cell("report:wide", "c0") / "checkpoint.pt"
    own.parent.mkdir(parents=True)
    own.write_bytes(b"")  # where `resume` looks when the recorded file is not here
    assert turn_seconds(pace, job, [claim, claim], folder) == 2 * 100.0  # a fused pair, 10 epochs left each
    assert turn_seconds(Pace(), job, [claim], folder) is None  # nothing finished here: unknown
