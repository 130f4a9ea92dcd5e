"""`run --fuse K` (sweep/group_run.py): a worker claims up to K cells of one row that differ only in lr, seed, epochs
and warmup, from every study of its stage (report seeds with the convergence check's 2x cells), and trains them as
one model; each keeps its own trial, MLflow run, telemetry and result, equal to its unfused run's. Cells the fusion
rules refuse train one by one, with the reason; a group below the plan's smallest trains its first cell alone; at a
stage's start a worker waits a moment for its group to fill. kill -9 of a fused worker mid-epoch, then a resume,
ends with every member exactly once (their checkpoints resumed fused)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pandas as pd
import pytest
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.store.claim import Claim
from normbench.store.ledger import Ledger
from normbench.sweep.cell_end import give_back
from normbench.sweep.checkpoints import CheckpointFolder
from normbench.sweep.group_run import claim_group, run_group
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_job
from normbench.tracking.tracker import Tracker
from tests.faults.helpers import assert_invariants, finish, normbench, stop_when, trials

LAYERS = ["layernorm", "layerscale"]
CELLS = [f"depth=2,layer={layer},lr={lr},seed={seed}" for layer in LAYERS for lr in (0.001, 0.003) for seed in (0, 1)]
FUSABLE = {"epochs": 2, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0}


def _suite(write_suite, **train):
    return write_suite(train={**FUSABLE, **train},
                       matrix={"depth": [2], "layer": LAYERS, "lr": [1e-3, 3e-3], "seed": [0, 1]})


def test_run_fuse_4_trains_each_row_as_one_group_and_equals_the_unfused_run(write_suite, tmp_path, capsys):
    path = _suite(write_suite, telemetry_every=4)  # telemetry recorded per member, through vmap's outputs
    assert main(["run", str(path), "--out", str(tmp_path / "fused"), "--fuse", "4", "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "alone"), "--fuse", "1", "--quiet"]) == 0
    assert_invariants(tmp_path / "fused", "tiny", CELLS)
    fused = pd.read_csv(tmp_path / "fused" / "results.csv").set_index("cell_id").sort_index()
    alone = pd.read_csv(tmp_path / "alone" / "results.csv").set_index("cell_id").sort_index()
    assert set(fused["fused_group"]) == {4} and set(alone["fused_group"]) == {1}
    assert ((fused["train_loss"] - alone["train_loss"]).abs() <= 1e-4 * alone["train_loss"].abs()).all()
    assert (fused["epochs_run"] == 2).all() and (fused["status"] == "ok").all()
    runs = {t.user_attrs["cell_id"]: t.user_attrs["result"] for t in trials(tmp_path / "fused", "tiny")}
    alone_runs = {t.user_attrs["cell_id"]: t.user_attrs["result"] for t in trials(tmp_path / "alone", "tiny")}
    for cell_id, result in runs.items():
        assert result["telemetry"] and result["telemetry"] == alone_runs[cell_id]["telemetry"], cell_id


def test_cells_the_rules_refuse_train_one_by_one_and_say_why(write_suite, tmp_path, capsys):
    path = _suite(write_suite, mixup=0.8)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--fuse", "4"]) == 0
    err = capsys.readouterr().err
    assert "train one by one: mixup/cutmix draw" in err, err
    csv = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(csv["fused_group"]) == {1} and len(csv) == len(CELLS)


def _queued(write_suite, tmp_path, **train):
    suite = load_suite(_suite(write_suite, **train))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    return suite, ledger, study, run_job(suite, study)


def test_a_group_takes_only_cells_whose_checkpoints_stand_where_its_first_does(write_suite, tmp_path):
    suite, ledger, study, job = _queued(write_suite, tmp_path)
    waiting = {t.user_attrs["cell_id"]: t for t in ledger.trials(study, (TrialState.WAITING,))}
    ahead = waiting["depth=2,layer=layernorm,lr=0.003,seed=1"]  # killed two epochs in, its checkpoint recorded
    ledger.storage.set_trial_user_attr(ahead._trial_id, "checkpoint", {"file": "x", "step": 8, "epoch": 2, "batch": 0})
    first = ledger.claim(study, lambda t: t.user_attrs["cell_id"] == "depth=2,layer=layernorm,lr=0.001,seed=0")
    group = claim_group(ledger, job, first, 4)
    assert {c.trial.user_attrs["cell_id"] for c in group} == {
        "depth=2,layer=layernorm,lr=0.001,seed=0", "depth=2,layer=layernorm,lr=0.001,seed=1",
        "depth=2,layer=layernorm,lr=0.003,seed=0"}  # fresh with fresh; the one ahead stays queued for its own turn


def test_a_row_the_rules_refuse_trains_its_first_cell_and_gives_the_others_back_at_once(write_suite, tmp_path):
    """A claim held but not trained has no heartbeat: a database ledger's peers would fail it as stale."""
    suite, ledger, study, job = _queued(write_suite, tmp_path, mixup=0.8)
    first = ledger.claim(study, job.listed)
    group = claim_group(ledger, job, first, 4)
    assert len(group) == 4
    turn = run_group(job, group, tracker=Tracker(tmp_path, suite.name), device="cpu",
                     progress=Progress(total=8, quiet=True), suite_name=suite.name)
    assert turn.alone is first and turn.given_back == 3 and turn.unfusable and "mixup" in turn.refused
    assert [t.number for t in ledger.trials(study, (TrialState.RUNNING,))] == [first.trial.number]
    assert len(ledger.trials(study, (TrialState.WAITING,))) == 7  # any worker may take them now


def test_when_the_member_shown_is_pruned_the_progress_line_follows_the_next_and_the_pruned_is_recorded_at_once(
        write_suite, tmp_path, monkeypatch):
    suite, ledger, study, job = _queued(write_suite, tmp_path, epochs=3)
    first = ledger.claim(study, job.listed)
    group = claim_group(ledger, job, first, 2)
    monkeypatch.setattr(Claim, "should_prune", lambda claim: claim.number == first.number)
    shown: list[tuple[int, int, int]] = []  # (epoch, trials RUNNING then, members the ETA counts) per epoch shown

    class Watched(Progress):
        def epoch(self, record):
            shown.append((record["epoch"], len(ledger.trials(study, (TrialState.RUNNING,))), len(self._training())))
            super().epoch(record)

    progress = Watched(total=8, quiet=True)
    turn = run_group(dataclasses.replace(job, prune_after=0.0), group, tracker=Tracker(tmp_path, suite.name),
                     device="cpu", progress=progress, suite_name=suite.name)
    assert turn.outcomes == ["trained", "trained"] and not turn.refused
    # epoch 0 from the first member (pruned then, and recorded before the next epoch), epochs 1-2 from the other;
    # the ETA weighs both members while both train, then the one left
    assert shown == [(0, 2, 2), (1, 1, 1), (2, 1, 1)]
    assert progress.cell == "" and not progress.fused and progress.done == 2
    assert ledger.storage.get_trial(first.id).state == TrialState.PRUNED


def test_a_bad_fuse_value_is_refused_with_the_fix(write_suite, tmp_path, capsys):
    path = _suite(write_suite)
    try:
        main(["run", str(path), "--out", str(tmp_path / "out"), "--fuse", "0"])
    except SystemExit as e:
        assert e.code == 2
    assert "give a group size of at least 1, or auto" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_kill_9_of_a_fused_worker_mid_epoch_then_a_resume_records_every_member_once(write_suite, tmp_path):
    # long cells and a checkpoint every epoch: killed mid-epoch with every member's checkpoint written
    path = _suite(write_suite, epochs=40, batch_size=64, checkpoint_minutes=1e-6)
    out = tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--fuse", "4", "--quiet")

    def group_in_flight() -> bool:  # every member's checkpoint recorded at one epoch, two epochs in
        running = [t for t in trials(out, "tiny") if t.state == TrialState.RUNNING]
        epochs = {(t.user_attrs.get("checkpoint") or {}).get("epoch") for t in running}
        return len(running) == 4 and len(epochs) == 1 and (epochs.pop() or 0) >= 2

    try:
        stop_when(proc, group_in_flight, timeout=240, what="a fused group two epochs in")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(list((out / "checkpoints").rglob("checkpoint.pt"))) == 4  # each member's, as an unfused cell's
    resumed = normbench("run", path, "--out", out, "--fuse", "4")
    code, err = finish(resumed, timeout=600)
    assert code == 0, err
    assert err.count("resumes from its checkpoint") >= 4, err
    assert_invariants(out, "tiny", CELLS)
    csv = pd.read_csv(out / "results.csv")
    assert set(csv["fused_group"]) == {4} and (csv["epochs_run"] == 40).all(), err


def test_a_resumed_groups_replayed_epochs_show_under_its_own_cells(write_suite, tmp_path, monkeypatch):
    """A fused group stopped in its second epoch resumes from its checkpoints: the epochs replayed into its runs show
    under the group's line, not under whatever the worker showed before (the previous group's cell, or none)."""
    suite, ledger, study, job = _queued(write_suite, tmp_path, epochs=4, checkpoint_minutes=1e-6)
    tracker, checkpoints = Tracker(tmp_path, suite.name), CheckpointFolder(tmp_path / "checkpoints")
    report, reports = Claim.report, []

    def stop_after_two_epochs(claim, value, step):
        report(claim, value, step)
        reports.append(claim.number)
        if len(reports) == 4:  # both members' second epoch
            raise KeyboardInterrupt  # SIGTERM, as the worker sees it: the members go back, their checkpoints stay

    monkeypatch.setattr(Claim, "report", stop_after_two_epochs)
    first = ledger.claim(study, job.listed)
    with pytest.raises(KeyboardInterrupt):
        run_group(job, claim_group(ledger, job, first, 2), tracker=tracker, device="cpu",
                  progress=Progress(total=8, quiet=True), suite_name=suite.name, checkpoints=checkpoints)
    monkeypatch.setattr(Claim, "report", report)

    shown: list[tuple[str, int]] = []  # (the line's cell, epoch) per epoch shown

    class Watched(Progress):
        def epoch(self, record):
            shown.append((self.cell, record["epoch"]))
            super().epoch(record)

    progress = Watched(total=8, quiet=True)
    progress.start_cell("depth=2,layer=layerscale,lr=0.001,seed=0", 4)  # what the worker showed before
    cell = first.trial.user_attrs["cell_id"]
    again = ledger.claim(study, lambda t: t.user_attrs["cell_id"] == cell)
    group = claim_group(ledger, job, again, 2)
    turn = run_group(job, group, tracker=tracker, device="cpu", progress=progress, suite_name=suite.name,
                     checkpoints=checkpoints)
    assert turn.outcomes == ["trained", "trained"]
    members = {c.trial.user_attrs["cell_id"] for c in group}
    # each member's first epoch replayed (the checkpoint the stop left), then the other three trained fused
    assert [epoch for _, epoch in shown] == [0, 0, 1, 2, 3]
    assert {cell for cell, _ in shown} <= members, shown


def test_a_rows_report_seeds_and_its_2x_convergence_cells_train_as_one_group_each_as_alone(write_suite, tmp_path):
    """Two studies (report, budget), two epoch counts: one group; each member recorded in its own study, with its own
    epochs, equal to the unfused run's."""
    path = write_suite(train={**FUSABLE, "epochs": 1}, report_seeds=[100, 101], budget_check=True,
                       matrix={"depth": [2], "layer": ["layernorm"], "lr": [1e-3, 3e-3], "seed": [0]})
    assert main(["run", str(path), "--out", str(tmp_path / "fused"), "--fuse", "4", "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(tmp_path / "alone"), "--fuse", "1", "--quiet"]) == 0
    fused = pd.read_csv(tmp_path / "fused" / "results.csv").set_index(["role", "cell_id"]).sort_index()
    alone = pd.read_csv(tmp_path / "alone" / "results.csv").set_index(["role", "cell_id"]).sort_index()
    stage = fused[fused.index.get_level_values("role").isin(["report", "budget"])]
    assert len(stage) == 4 and set(stage["fused_group"]) == {4}, stage[["fused_group", "epochs_run"]]
    assert sorted(stage["epochs_run"]) == [1, 1, 2, 2]
    assert ((fused["train_loss"] - alone["train_loss"]).abs() <= 1e-4 * alone["train_loss"].abs()).all()


def test_a_group_fills_at_a_stages_start_while_a_peer_queues_the_rest(write_suite, tmp_path):
    import threading

    from normbench.sweep.fuse_plan import FusePlan
    from normbench.sweep.group_run import fill_group

    suite = load_suite(_suite(write_suite))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    job = run_job(suite, study)
    row = [c for c in suite.cells() if c.axes["layer"] == "layernorm"]
    ledger.enqueue(study, {row[0].cell_id: row[0].axes})
    first = ledger.claim(study, job.listed)
    late = threading.Timer(1.0, lambda: ledger.enqueue(study, {c.cell_id: c.axes for c in row[1:]}))
    late.start()
    try:
        at_start = fill_group(ledger, job, first, FusePlan(k=4, wait_s=10.0), [job], wait=True)
    finally:
        late.join()
    assert len(at_start) == 4  # the three a peer queued a second later joined it
    for claim in at_start[1:]:
        give_back(claim)
    started = time.monotonic()
    again = fill_group(ledger, job, first, FusePlan(k=8, wait_s=10.0), [job], wait=False)
    assert len(again) == 4 and time.monotonic() - started < 5.0  # mid-stage: what is queued now, no wait


def test_a_stop_while_a_group_fills_gives_every_claim_back(write_suite, tmp_path):
    import threading

    from normbench import stopping
    from normbench.errors import Terminated
    from normbench.sweep.fuse_plan import FusePlan
    from normbench.sweep.group_run import fill_group

    suite, ledger, study, job = _queued(write_suite, tmp_path)  # 4 cells a row: a group of 16 waits to fill
    first = ledger.claim(study, job.listed)
    previous = stopping.install()
    stop = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    stop.start()
    try:
        with pytest.raises(Terminated):
            fill_group(ledger, job, first, FusePlan(k=16, wait_s=30.0), [job], wait=True)
    finally:
        stop.join()
        stopping.uninstall(previous)
    assert ledger.trials(study, (TrialState.RUNNING,)) == []  # none held untrained: any worker may take them


def test_a_group_smaller_than_the_plans_smallest_trains_its_first_cell_and_gives_the_rest_back(write_suite, tmp_path):
    from normbench.sweep.fuse_plan import FusePlan
    from normbench.sweep.group_run import fill_group

    suite, ledger, study, job = _queued(write_suite, tmp_path)  # 4 cells a row
    first = ledger.claim(study, job.listed)
    four = fill_group(ledger, job, first, FusePlan(k=16, min_k=4), [job], wait=False)
    assert len(four) == 4
    for claim in four[1:]:
        give_back(claim)
    assert fill_group(ledger, job, first, FusePlan(k=16, min_k=5), [job], wait=False) == [first]
    assert [t.number for t in ledger.trials(study, (TrialState.RUNNING,))] == [first.trial.number]
