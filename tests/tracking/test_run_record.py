"""The names MLflow shows: short run names, and telemetry metrics under one prefix for three blocks."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from normbench.contracts.suite import cell_id
from normbench.tracking.run_record import logged_blocks, run_name, short_number, telemetry_metric
from normbench.tracking.tracker import Tracker
from normbench.train.telemetry import QUANTITIES
from tests.tracking.ledgers import live_run


@pytest.mark.parametrize(("axes", "name"), [
    ({"depth": 36, "layer": "layerscale", "lr": 3e-3, "seed": 0}, "d36 layerscale lr3e-3 s0"),
    ({"seed": 1, "lr": 1e-4, "layer": "learnable_scaler+layerscale", "depth": 8},
     "d8 learnable_scaler+layerscale lr1e-4 s1"),
    ({"depth": 2, "layer": "rmsnorm", "lr": 3.333e-3, "epochs": 50, "seed": 2}, "d2 rmsnorm ep50 lr3.33e-3 s2"),
    ({"layer": "fixup", "lr": 0.1, "warmup_epochs": 5}, "fixup lr0.1 warmup_epochs=5"),
])
def test_a_run_is_named_by_its_axes_in_a_few_characters(axes: dict, name: str) -> None:
    assert run_name(cell_id(axes)) == name
    assert run_name(cell_id(axes), attempt=2) == f"{name} #2"


def test_a_tune_trial_keeps_its_number_last() -> None:
    assert run_name("depth=2,layer=rezero,lr=0.00316,trial=4") == "d2 rezero lr3.16e-3 trial4"


@pytest.mark.parametrize(("text", "short"), [("0.003", "3e-3"), ("0.0003162", "3.16e-4"), ("0.05", "5e-2"),
                                             ("0.1", "0.1"), ("3", "3"), ("1e-05", "1e-5"), ("adamw", "adamw")])
def test_short_numbers(text: str, short: str) -> None:
    assert short_number(text) == short


def test_telemetry_goes_under_one_prefix_for_the_first_middle_and_last_block() -> None:
    assert logged_blocks(36) == {"first": 0, "middle": 18, "last": 35}
    assert logged_blocks(2) == {"first": 0, "middle": 1, "last": 1} and set(logged_blocks(1).values()) == {0}
    assert telemetry_metric("last", "grad_norm") == "telemetry/last/grad_norm"


def test_the_tracker_logs_three_blocks_by_position_whatever_the_depth(tmp_path: Path) -> None:
    tracker = Tracker(tmp_path, "names")
    runs = {}
    for depth in (2, 8):
        runs[depth] = tracker.start(live_run(f"depth={depth},layer=a", {"depth": depth, "layer": "a"}, "run:names",
                                             depth))
        records = [{"step": s, "block": b, **{q: float(b) for q in QUANTITIES}, "attn_entropy": None}
                   for s in (0, 5) for b in range(depth)]
        tracker.log_telemetry(runs[depth], records)
        tracker.log_epoch(runs[depth], {"epoch": 0, "val_top1": 50.0, "train_loss": 1.0, "lr": 1e-3, "step": 5})
    tracker.finish()  # the background thread's writes, done
    client = MlflowClient(tracker.uri)
    ids = {depth: client.search_runs([client.get_experiment_by_name("names").experiment_id],
                                     f"tags.trial = '{depth}'")[0].info.run_id for depth in runs}
    expected = {f"telemetry/{p}/{q}" for p in ("first", "middle", "last") for q in QUANTITIES if q != "attn_entropy"}
    for depth, run in ids.items():
        metrics = client.get_run(run).data.metrics
        assert {k for k in metrics if k.startswith("telemetry/")} == expected
        assert {"val_top1", "train_loss", "scheduled_lr"} <= set(metrics)
        assert not [k for k in metrics if "/" in k and not k.startswith("telemetry/")]
        assert metrics["telemetry/last/grad_norm"] == depth - 1 and metrics["telemetry/middle/grad_norm"] == depth // 2
        assert client.get_run(run).info.run_name == f"d{depth} a"
    assert [m.step for m in client.get_metric_history(ids[8], "telemetry/last/grad_norm")] == [0, 5]
