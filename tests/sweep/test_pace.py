"""The ETA's weights: each queued cell costs what this host took for its shape (every axis but lr, seed and epochs),
so a queue of slow layers is not promised at a fast layer's speed; cells other machines trained do not count."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import parse_suite
from normbench.store.ledger import Ledger, worker_host
from normbench.sweep.pace import Pace
from normbench.sweep.run import cell_costs, open_run


def finished(layer: str, seconds: float, *, host: str = "here", depth: int = 6, lr: float = 1e-3, seed: int = 0,
             epochs_run: int = 10) -> optuna.trial.FrozenTrial:
    axes = {"depth": depth, "layer": layer, "lr": lr, "seed": seed}
    return optuna.trial.create_trial(state=TrialState.COMPLETE, value=50.0, user_attrs={
        "cell_id": f"depth={depth},layer={layer},lr={lr},seed={seed}", "axes": axes, "worker_host": host,
        "result": {"status": "ok", "seconds": seconds, "epochs_run": epochs_run}})


def depth_axis(axes: dict) -> int:
    return int(axes["depth"])


def test_a_known_shape_costs_its_median_seconds_per_epoch_whatever_its_lr_seed_or_epochs():
    pace = Pace.learn([finished("mhc", 100.0, seed=0), finished("mhc", 300.0, seed=1, lr=3e-3),
                       finished("mhc", 120.0, seed=2), finished("layernorm", 20.0)], "here", depth_axis)
    mhc = {"depth": 6, "layer": "mhc", "lr": 1e-2, "seed": 100, "epochs": 80}
    assert pace.cost(mhc, depth=6, epochs=80) == 12.0 * 80  # median of 10, 30, 12 s per epoch
    assert pace.cost({**mhc, "layer": "layernorm"}, depth=6, epochs=10) == 20.0


def test_a_shape_never_trained_here_costs_the_median_seconds_per_depth_epoch():
    pace = Pace.learn([finished("layernorm", 60.0, depth=6), finished("layernorm", 240.0, depth=12),
                       finished("rezero", 600.0, depth=12)], "here", depth_axis)
    # per depth-epoch: 1, 2 and 5 s: the median is 2
    assert pace.cost({"depth": 36, "layer": "hc", "lr": 1e-3}, depth=36, epochs=40) == 2.0 * 36 * 40


def test_other_hosts_cells_and_cells_without_a_time_teach_nothing():
    pace = Pace.learn([finished("layernorm", 5.0, host="gpu-node"), finished("layernorm", 0.0),
                       finished("layernorm", 50.0, epochs_run=0)], "here", depth_axis)
    assert pace == Pace()
    assert pace.cost({"depth": 6, "layer": "layernorm"}, depth=6, epochs=10) == 60.0  # depth x epochs


def test_a_resumed_run_weighs_its_queue_by_what_each_layer_took_here(tmp_path: Path):
    suite = parse_suite({"name": "p", "dataset": {"name": "digits"}, "train": {"epochs": 10},
                         "matrix": {"depth": [6], "layer": ["layernorm", "mhc"], "lr": [1e-3, 3e-3], "seed": [0]}},
                        tmp_path / "p.yaml")
    ledger = Ledger(None, tmp_path)
    open_run(suite, ledger, tmp_path, quiet=True)  # queues the matrix
    study = ledger.study(StudyNames("p").run)
    here = worker_host()
    for trial in ledger.trials(study, (TrialState.WAITING,)):  # lr 1e-3 trained here: mhc took 5x layernorm
        axes = trial.user_attrs["axes"]
        if axes["lr"] == 1e-3:
            seconds = {"layernorm": 40.0, "mhc": 200.0}[axes["layer"]]
            study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=50.0, user_attrs={
                **trial.user_attrs, "worker_host": here, "result": {"status": "ok", "seconds": seconds,
                                                                   "epochs_run": 10}}))
    _, _, progress = open_run(suite, ledger, tmp_path, quiet=True)
    assert sorted(progress.costs.values()) == [40.0, 200.0]
    # the same queue weighed by depth x epochs alone would call both cells equal
    assert cell_costs(suite, {"a": {"depth": 6, "layer": "mhc", "lr": 3e-3, "seed": 0}}, Pace()) == {"a": 60.0}
