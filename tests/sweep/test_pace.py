"""The ETA's weights: each queued cell costs what this host took for its shape (every axis but lr, seed and the
schedule's length), in one unit (depth-epochs) whether or not any cell has finished, so a queue of slow layers is not
promised at a fast layer's speed; cells other machines trained do not count."""

from __future__ import annotations

import io
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import parse_suite
from normbench.store.ledger import Ledger, worker_host
from normbench.sweep.pace import Pace
from normbench.sweep.progress import Progress, note_new_cells
from normbench.sweep.run import open_run, pace_of
from normbench.train.device import device_name


def finished(layer: str, seconds: float, *, host: str = "here", depth: int = 6, lr: float = 1e-3, seed: int = 0,
             epochs_run: int = 10, device: str = "CPU (x86_64, 2 cores)") -> optuna.trial.FrozenTrial:
    axes = {"depth": depth, "layer": layer, "lr": lr, "seed": seed}
    return optuna.trial.create_trial(state=TrialState.COMPLETE, value=50.0, user_attrs={
        "cell_id": f"depth={depth},layer={layer},lr={lr},seed={seed}", "axes": axes, "worker_host": host,
        "result": {"status": "ok", "seconds": seconds, "epochs_run": epochs_run, "device": device}})


def depth_axis(axes: dict) -> int:
    return int(axes["depth"])


def test_a_known_shape_costs_its_median_seconds_per_epoch_whatever_its_lr_seed_or_schedule():
    pace = Pace.learn([finished("mhc", 100.0, seed=0), finished("mhc", 300.0, seed=1, lr=3e-3),
                       finished("mhc", 120.0, seed=2), finished("layernorm", 20.0)], "here", depth_axis)
    mhc = {"depth": 6, "layer": "mhc", "lr": 1e-2, "seed": 100, "epochs": 80, "warmup_epochs": 4}  # a budget cell
    layernorm = {**mhc, "layer": "layernorm"}
    # mhc: the median of 10, 30 and 12 s per epoch; layernorm 2 s: 6x, at any lr, seed or stretched schedule
    assert pace.cost(mhc, depth=6, epochs=80) == pytest.approx(6 * pace.cost(layernorm, depth=6, epochs=80))


def test_costs_are_depth_epochs_at_this_hosts_median_pace_known_or_not():
    pace = Pace.learn([finished("layernorm", 60.0, depth=6), finished("layernorm", 240.0, depth=12),
                       finished("rezero", 600.0, depth=12)], "here", depth_axis)
    # per depth-epoch: 1, 2 and 5 s: the median, 2 s, is the unit
    assert pace.cost({"depth": 36, "layer": "hc"}, depth=36, epochs=40) == 36 * 40  # never trained here
    assert pace.cost({"depth": 12, "layer": "rezero"}, depth=12, epochs=40) == 60.0 / 2.0 * 40  # 5 s at 2 s a unit


def test_other_hosts_cells_and_cells_without_a_time_teach_nothing():
    pace = Pace.learn([finished("layernorm", 5.0, host="gpu-node"), finished("layernorm", 0.0),
                       finished("layernorm", 50.0, epochs_run=0)], "here", depth_axis)
    assert pace == Pace()
    assert pace.cost({"depth": 6, "layer": "layernorm"}, depth=6, epochs=10) == 60.0  # depth x epochs


def test_a_fused_member_costs_the_share_of_its_groups_seconds_it_recorded():
    alone = finished("layernorm", 100.0, seed=0)
    fused = finished("layernorm", 100.0, seed=1)  # a group of 4 trained in 400 s: its member records 100 s
    fused.user_attrs["result"]["fused_group"] = 4
    assert Pace.learn([alone, fused], "here", depth_axis).per_epoch == {
        (("depth", "6"), ("layer", "layernorm")): pytest.approx(10.0)}


def test_a_lent_gpu_under_this_hosts_name_teaches_nothing_of_this_cpu():
    """The lent GPU machine is called what this VM is ("vm"): only the device a result names tells them apart."""
    gpu = finished("layernorm", 4.0, device="NVIDIA H200")
    cpu = finished("layernorm", 200.0, seed=1)
    pace = Pace.learn([gpu, cpu], "here", depth_axis, device="CPU (x86_64, 2 cores)")
    assert pace.per_depth_epoch == pytest.approx(200.0 / 10 / 6)
    assert Pace.learn([gpu], "here", depth_axis, device="CPU (x86_64, 2 cores)") == Pace()


def test_cells_queued_before_and_after_any_finished_share_one_unit(tmp_path: Path):
    """A fresh run weighs its matrix by depth x epochs; the rounds it queues later by what each layer took. Both in
    one unit, or the ETA (elapsed per unit done, times units left) is off by the seconds per depth-epoch."""
    suite = parse_suite({"name": "p", "dataset": {"name": "digits"}, "train": {"epochs": 10},
                         "matrix": {"depth": [6], "layer": ["layernorm", "mhc"], "lr": [1e-3, 3e-3], "seed": [0]}},
                        tmp_path / "p.yaml")
    ledger = Ledger(None, tmp_path)
    _, _, progress = open_run(suite, ledger, tmp_path, quiet=True)
    assert set(progress.costs.values()) == {60.0}  # nothing finished: depth 6 x 10 epochs each
    study = ledger.study(StudyNames("p").run)
    for trial in ledger.trials(study, (TrialState.WAITING,)):  # lr 1e-3 trained here: 6 s and 30 s (5x) an epoch
        axes = trial.user_attrs["axes"]
        if axes["lr"] == 1e-3:
            seconds = {"layernorm": 60.0, "mhc": 300.0}[axes["layer"]]
            study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=50.0, user_attrs={
                **trial.user_attrs, "worker_host": worker_host(),
                "result": {"status": "ok", "seconds": seconds, "epochs_run": 10, "device": device_name()}}))
    later = Progress(total=0, stream=io.StringIO(), costs={"matrix cell": 60.0})
    note_new_cells(later, suite, "bracket:p:1", {
        "ln": {"depth": 6, "layer": "layernorm", "lr": 1e-2, "seed": 0},
        "mhc": {"depth": 6, "layer": "mhc", "lr": 1e-2, "seed": 0}}, pace_of(ledger, suite))
    # the median pace, 3 s per depth-epoch, is the unit: layernorm's 60 s cell is 20 units and mhc's 300 s 100,
    # beside the 60 units (180 s at that pace) a matrix cell was weighed at before any finished
    assert later.costs == pytest.approx({"matrix cell": 60.0, "ln": 20.0, "mhc": 100.0})
    _, _, resumed = open_run(suite, ledger, tmp_path, quiet=True)  # a resumed run weighs its queue the same way
    assert sorted(resumed.costs.values()) == pytest.approx([20.0, 100.0]) and resumed.unit == 3.0
    # and keeps that unit for what it queues later, whatever the mix of layers finished since
    resumed.unit = 1.5
    note_new_cells(resumed, suite, "bracket:p:1", {"ln": {"depth": 6, "layer": "layernorm", "lr": 1e-2}},
                   pace_of(ledger, suite))
    assert resumed.costs["ln"] == pytest.approx(6.0 / 1.5 * 10)
