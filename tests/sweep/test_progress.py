"""The status line's ETA weighs the cells still to run by their cost, so deep cells are not promised at the speed
of shallow ones."""

from __future__ import annotations

import io

import pytest

from normbench.contracts.results import CellResult
from normbench.sweep import progress as progress_module
from normbench.sweep.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finish(progress: Progress, cell: str, clock: Clock, seconds: float) -> None:
    progress.start_cell(cell, epochs=1)
    clock.now += seconds
    progress.end_cell(CellResult.from_summary({"status": "ok", "best_val_top1": 50.0, "val_top1": 48.0,
                                               "seconds": seconds}))


def test_eta_scales_with_the_cost_of_the_cells_left(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    costs = {"depth=6": 6.0, "depth=12": 12.0, "depth=36": 36.0}
    progress = Progress(total=3, stream=io.StringIO(), costs=costs)
    assert progress.eta() == "?"
    finish(progress, "depth=6", clock, 60.0)  # 10 s per unit of depth: 48 units left -> 8 minutes
    assert progress.eta() == "8m00s"
    finish(progress, "depth=12", clock, 120.0)
    assert progress.eta() == "6m00s"


def test_without_costs_every_cell_counts_as_one(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=4, done=1, stream=stream)
    finish(progress, "a", clock, 30.0)
    assert progress.eta() == "1m00s"
    assert "[2/4] a  ok  val 48.0%  30.0s  ETA 1m00s" in stream.getvalue()


def test_without_a_terminal_an_epoch_line_at_most_every_log_every_seconds(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()  # not a tty: a log file, SLURM's output
    progress = Progress(total=2, stream=stream, log_every=30.0)
    progress.start_cell("depth=12", epochs=4)
    for seconds, epoch in ((10.0, 0), (10.0, 1), (15.0, 2)):
        clock.now += seconds
        progress.epoch({"epoch": epoch, "val_top1": 40.0 + epoch})
    lines = stream.getvalue().splitlines()
    # epoch 1 prints (a quarter of 2 cells in 10 s: 70 s left); epochs 2 and 3 come 10 and 25 s after it: quiet
    assert lines == ["[0/2] depth=12  epoch 1/4  val 40.0%  ETA 1m10s"]
    clock.now += 6.0
    progress.epoch({"epoch": 3, "val_top1": 44.5})
    assert stream.getvalue().splitlines()[-1] == "[0/2] depth=12  epoch 4/4  val 44.5%  ETA 0m41s"
    assert "\r" not in stream.getvalue() and "\033" not in stream.getvalue()


def test_eta_counts_the_trained_part_of_the_current_cell(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    progress = Progress(total=2, stream=io.StringIO(), costs={"a": 1.0, "b": 1.0})
    progress.start_cell("a", epochs=4)
    clock.now += 60.0
    progress.epoch({"epoch": 1, "val_top1": 10.0})  # half of a in 60 s: 1.5 cells left at 120 s each
    assert progress.eta() == "3m00s"


def test_a_finished_cell_leaves_an_eta_for_the_cells_still_to_run(monkeypatch):
    """The line of a cell that reported its last epoch said "ETA 0m00s" while cells remained: its cost was counted
    twice, as done and as the current cell's trained part."""
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=3, stream=stream, costs={"a": 2.0, "b": 2.0, "c": 2.0}, log_every=0)
    progress.start_cell("a", epochs=2)
    for epoch in range(2):
        clock.now += 30.0
        progress.epoch({"epoch": epoch, "val_top1": 40.0})
    progress.end_cell(CellResult.from_summary({"status": "ok", "val_top1": 40.0, "seconds": 60.0}))
    assert stream.getvalue().splitlines()[-1] == "[1/3] a  ok  val 40.0%  60.0s  ETA 2m00s"  # 2 cells at 60 s each


def test_a_finished_line_shows_the_val_that_is_scored_not_the_best_epochs(monkeypatch):
    stream = io.StringIO()
    progress = Progress(total=3, stream=stream)
    final_below_best = {"best_val_top1": 80.0, "final_val_top1": 70.0, "seconds": 1.0}
    progress.record("ok", CellResult.from_summary({"status": "ok", "val_top1": 70.0, **final_below_best}))
    progress.record("diverged", CellResult.from_summary({"status": "diverged", **final_below_best}))
    progress.record("pruned", CellResult.from_summary({"status": "pruned", "epochs_run": 2, **final_below_best}))
    lines = [line.split("  ETA")[0] for line in stream.getvalue().splitlines()]
    assert lines == ["[1/3] ok  ok  val 70.0%  1.0s", "[2/3] diverged  diverged  val 0.0%  1.0s",
                     "[3/3] pruned  pruned after epoch 2  val 70.0%  1.0s"]


def test_a_cell_finished_by_a_worker_process_is_reported_with_its_result(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=3, done=1, stream=stream)
    clock.now += 20.0
    progress.record("layer=rezero", CellResult.from_summary({"status": "ok", "best_val_top1": 61.25, "val_top1": 60.0,
                                                             "seconds": 19.5}), where="  (worker 42)")
    progress.record("layer=dyt", None)  # a cell without a stored result still counts
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[2/3] layer=rezero  ok  val 60.0%  19.5s  (worker 42)  ETA 0m20s"
    assert lines[1].startswith("[3/3] layer=dyt  finished") and progress.done == 3


def test_the_parent_sees_each_finished_cell_once(tmp_path):
    from normbench.store.ledger import Ledger
    from normbench.sweep.watch import newly_finished

    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:p")
    ledger.enqueue(study, {"layer=a": {"layer": "a"}, "layer=b": {"layer": "b"}})
    seen: set[tuple[str, int]] = set()
    assert newly_finished(ledger, ["run:p", "tune:absent"], seen) == []
    claim = ledger.claim(study)
    claim.finish(CellResult.from_summary({"status": "ok", "best_val_top1": 50.0}))
    [finished] = newly_finished(ledger, ["run:p"], seen)
    assert finished.user_attrs["cell_id"] == claim.user_attrs["cell_id"]
    assert finished.user_attrs["result"]["best_val_top1"] == 50.0
    assert newly_finished(ledger, ["run:p"], seen) == []


def test_cells_in_flight_in_other_processes_count_their_trained_part(monkeypatch):
    """The parent of two workers saw its ETA swing 2x (8h35m, 4h24m, 6h38m) as cells finished in pairs: a cell
    half trained by a worker counted as nothing until it finished."""
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    progress = Progress(total=4, stream=io.StringIO(), costs={c: 1.0 for c in "abcd"})
    progress.running({"a": 0.0, "b": 0.0})  # two workers start a cell each
    clock.now += 60.0
    progress.running({"a": 0.5, "b": 0.5})  # half way each: one cell's worth in 60 s
    assert progress.eta() == "3m00s"  # 3 cells' worth left
    progress.record("a", None)  # a finishes: counted once, as done, no longer in flight
    # 1.5 cells' worth done in 60 s (40 s each); left: c, d and b's other half
    assert progress.in_flight == {"b": 0.5} and progress.eta() == "1m40s"


def test_the_parent_reads_each_running_cells_epochs_from_the_ledger(tmp_path):
    from pathlib import Path

    from normbench.contracts.suite import parse_suite
    from normbench.store.ledger import Ledger
    from normbench.sweep.run import open_run
    from normbench.sweep.watch import WorkerWatch

    suite = parse_suite({"name": "w", "dataset": {"name": "digits"}, "train": {"epochs": 4},
                         "matrix": {"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0]}},
                        Path("w.yaml"))
    ledger = Ledger(None, tmp_path)
    _, studies, progress = open_run(suite, ledger, tmp_path, quiet=True)
    watch = WorkerWatch(suite, ledger, progress, studies)
    claim = ledger.claim(ledger.study(studies[0]))  # a worker's cell, two of its four epochs reported
    for epoch in range(2):
        claim.report(50.0, step=epoch)
    watch.report()
    assert progress.in_flight == {claim.user_attrs["cell_id"]: 0.5}
    claim.finish(CellResult.from_summary({"status": "ok", "best_val_top1": 50.0, "val_top1": 50.0}))
    watch.report()
    assert progress.in_flight == {} and progress.done == 1


def test_a_resumed_cell_counts_only_the_epochs_trained_since_it_was_first_seen(monkeypatch):
    """A worker resuming a checkpoint replays its earlier epochs onto the trial at once: counted as this run's work,
    a restart with two cells 90% trained read an ETA of minutes for hours of cells."""
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    progress = Progress(total=3, stream=io.StringIO(), costs={c: 1.0 for c in "abc"})
    progress.running({"a": 0.9})  # resumed: 90% trained before this run
    clock.now += 10.0
    assert progress.eta() == "?"  # nothing trained in this run yet
    progress.running({"a": 1.0})  # its last tenth, in 10 s: 100 s a cell
    assert progress.eta() == "3m20s"  # b and c left, 200 s; a's trained part is no longer left either
    progress.record("a", None)
    assert progress.cost_done == pytest.approx(0.1) and progress.cost_left == pytest.approx(2.0)


def test_a_fused_group_counts_every_members_cost_at_the_shared_epoch(monkeypatch):
    """The ETA of a fused group of wide cells read "9129h": it weighed the line's label, not a cell, at cost 1 against
    cells costing depth x epochs each."""
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=4, stream=stream, costs={"a": 2.0, "b": 2.0, "c": 2.0, "d": 2.0}, log_every=0)
    progress.start_cell("a", epochs=4, fused=["b"])
    clock.now += 60.0
    progress.epoch({"epoch": 1, "val_top1": 30.0})  # half of a and b (2 units) in 60 s: 6 units left at 30 s each
    assert stream.getvalue().splitlines()[-1] == "[0/4] a (+1 fused)  epoch 2/4  val 30.0%  ETA 3m00s"


def test_a_fused_member_that_ends_early_is_done_and_the_line_follows_the_next(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=4, stream=stream, costs={"a": 2.0, "b": 2.0, "c": 2.0, "d": 2.0}, log_every=0)
    progress.start_cell("a", epochs=4, fused=["b", "c"])
    clock.now += 60.0
    progress.epoch({"epoch": 1, "val_top1": 10.0})
    progress.record("a", CellResult.from_summary({"status": "pruned", "epochs_run": 2, "final_val_top1": 10.0,
                                                  "seconds": 60.0}))
    # a done (2 units) and half of b and c (2 units) in 60 s: 15 s a unit, 4 units left (d, and half of b and c)
    assert stream.getvalue().splitlines()[-1].endswith("ETA 1m00s")
    clock.now += 60.0
    progress.epoch({"epoch": 3, "val_top1": 50.0})
    # a, and all of b and c (6 units) in 120 s: 20 s a unit, d's 2 units left
    assert stream.getvalue().splitlines()[-1] == "[1/4] b (+1 fused)  epoch 4/4  val 50.0%  ETA 0m40s"
    for cell in ("b", "c"):
        progress.record(cell, CellResult.from_summary({"status": "ok", "val_top1": 50.0, "seconds": 120.0}))
    assert progress.eta() == "0m40s" and progress.cell == "" and not progress.fused


def test_a_fused_member_whose_claim_was_lost_is_neither_done_nor_still_counted(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    progress = Progress(total=3, stream=io.StringIO(), costs={"a": 2.0, "b": 2.0, "c": 2.0})
    progress.start_cell("a", epochs=2, fused=["b"])
    clock.now += 60.0
    progress.epoch({"epoch": 0, "val_top1": 10.0})
    progress.forget("a")  # another worker took a over: its cost is neither done here nor trained in part
    assert progress.cell == "b" and not progress.fused and progress.done == 0
    progress.forget("b")
    assert progress.cell == "" and progress.eta() == "?"


def test_a_fused_member_not_shown_that_ends_early_leaves_the_line_and_the_eta(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    progress = Progress(total=3, stream=io.StringIO(), costs={"a": 2.0, "b": 2.0, "c": 2.0})
    progress.start_cell("a", epochs=2, fused=["b", "c"])
    clock.now += 60.0
    progress.epoch({"epoch": 0, "val_top1": 10.0})
    progress.record("c", CellResult.from_summary({"status": "pruned", "epochs_run": 1, "final_val_top1": 10.0,
                                                  "seconds": 60.0}))
    assert progress.cell == "a" and progress.fused == ["b"]
    # c done (2 units) and half of a and b (2 units) in 60 s: 15 s a unit, a's and b's other halves left
    assert progress.eta() == "0m30s"
    progress.forget("b")
    assert progress.fused == []


def test_cells_a_peer_queued_after_this_process_counted_join_the_total(monkeypatch):
    """A standalone worker counted 2 cells; a peer then queued the report stage, and this worker's line read [3/2]."""
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    stream = io.StringIO()
    progress = Progress(total=2, stream=stream, costs={"a": 2.0, "b": 4.0})
    finish(progress, "a", clock, 60.0)
    finish(progress, "b", clock, 120.0)
    progress.start_cell("report1", epochs=1, fused=["report2"])  # each at the mean cost known, 3 units
    assert progress.total == 4 and progress.eta() == "3m00s"  # 6 units left at 30 s each
    progress.running({"report3": 0.5})  # trained by another process of this run
    assert progress.total == 5
    progress.record("report4", None)  # finished by another process, never seen in flight
    assert progress.total == 6 and progress.done == 3
    assert "[3/6] report4  finished" in stream.getvalue()


def test_the_parent_follows_a_tune_confirmation_its_workers_train(write_suite, tmp_path):
    """A confirmation's axes name its search trial (`search_trial`), which is no recipe key: the parent of `tune
    --workers 2` crashed reading one in flight, as the tuned folder would have at its first confirmation."""
    from normbench.contracts.names import StudyNames
    from normbench.contracts.suite import load_suite
    from normbench.store.ledger import Ledger
    from normbench.sweep.cells import open_study_of_recipe
    from normbench.sweep.tune import open_tune
    from normbench.sweep.watch import WorkerWatch

    suite = load_suite(write_suite(name="wc", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                                   tune={"trials": 1, "confirm_top": 1,
                                         "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}}))
    ledger = Ledger(None, tmp_path)
    _, studies, progress = open_tune(suite, ledger, tmp_path, quiet=True)
    confirm = open_study_of_recipe(ledger, suite, StudyNames("wc").confirm)
    axes = {"depth": 1, "layer": "layernorm", "seed": 2, "search_trial": 0}
    ledger.enqueue(confirm, {"depth=1,layer=layernorm,search_trial=0,seed=2": axes}, {
        "depth=1,layer=layernorm,search_trial=0,seed=2": {"overrides": {"lr": 3e-3}}})
    watch = WorkerWatch(suite, ledger, progress, studies)
    claim = ledger.claim(confirm)  # a worker trains it, one of its epochs reported
    claim.report(50.0, step=0)
    watch.report()
    epochs = suite.cell({}).config.train.epochs
    assert progress.in_flight == {"depth=1,layer=layernorm,search_trial=0,seed=2": 1 / epochs}
