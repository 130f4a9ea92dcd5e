"""`normbench run --dry-run` on a sweep in its report stage: every queued cell is listed and counted, finished or not,
and the time left is estimated from what this host took for each layer; it writes nothing."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.names import StudyNames
from normbench.store.ledger import Ledger, worker_host
from normbench.train.device import device_name

MATRIX = {"depth": [6], "layer": ["layernorm"], "lr": [1e-3, 3e-3], "seed": [0]}


def test_queued_report_cells_are_listed_counted_and_timed(write_suite, tmp_path: Path, capsys):
    path = write_suite(name="d", matrix=MATRIX, train={"epochs": 10}, report_seeds=[100, 101])
    out = tmp_path / "out"
    ledger = Ledger(None, out)
    run = ledger.study(StudyNames("d").run)
    for lr, val in ((1e-3, 80.0), (3e-3, 70.0)):  # selection done here: an hour a cell
        axes = {"depth": 6, "layer": "layernorm", "lr": lr, "seed": 0}
        run.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=val, user_attrs={
            "cell_id": f"depth=6,layer=layernorm,lr={lr},seed=0", "axes": axes, "worker_host": worker_host(),
            "result": {"status": "ok", "val_top1": val, "best_val_top1": val, "test_top1": val, "seconds": 3600.0,
                       "epochs_run": 10, "device": device_name()}}))
    report = ledger.study(StudyNames("d").report)
    ledger.enqueue(report, {
        f"depth=6,layer=layernorm,lr=0.001,seed={s}": {"depth": 6, "layer": "layernorm", "lr": 1e-3, "seed": s}
        for s in (100, 101)})
    training = ledger.claim(report).user_attrs["cell_id"]  # a worker trains one of them
    ledger.close()
    journal = (out / "ledger.journal").read_bytes()

    assert main(["run", str(path), "--out", str(out), "--dry-run"]) == 0
    listed = capsys.readouterr().out
    statuses = {line.split()[0]: line.split(None, 1)[1].strip() for line in listed.splitlines() if "seed=10" in line}
    assert statuses == {training: "running (report seed)",
                        **{cid: "to run (report seed)" for cid in statuses if cid != training}}
    assert len(statuses) == 2
    assert "4 cells, 2 finished" in listed
    assert "time left: 2 queued cells, about 2.0 hours of one worker's training" in listed
    assert (out / "ledger.journal").read_bytes() == journal  # a dry run writes nothing


def test_before_any_cell_finished_the_time_left_comes_from_the_train_step_measured_here(write_suite, tmp_path,
                                                                                         capsys):
    """The README promises the time left here from the first dry run: with no ledger yet, from the cost file
    `normbench bench SUITE --out OUT` wrote (each cell: its epochs x batches x its layer's step), else it says what
    it lacks."""
    path, out = write_suite(name="t"), tmp_path / "out"  # digits: 1077 train images, batch 256: 5 steps an epoch
    assert main(["run", str(path), "--out", str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out.splitlines()[-1]
    assert said.startswith("time left: not known yet") and f"`normbench bench {path} --out {out}`" in said
    assert not out.exists()

    out.mkdir()
    steps = {"layernorm": 360_000.0, "layerscale": 720_000.0}  # ms: 6 and 12 minutes a step
    pd.DataFrame([{"suite": "t", "layer": layer, "depth": 1, "step_ms": ms} for layer, ms in steps.items()]).to_csv(
        out / "cost-cpu-2.x.csv", index=False)
    assert main(["run", str(path), "--out", str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out.splitlines()[-1]
    # 1 epoch x 5 steps x (6 + 12) minutes = 1.5 hours
    assert said.startswith("time left: 2 queued cells, about 1.5 hours") and "cost-cpu-2.x.csv" in said
    pd.DataFrame([{"suite": "t", "layer": "layernorm", "depth": 1, "step_ms": 1.0}]).to_csv(
        out / "cost-cpu-2.x.csv", index=False)
    assert main(["run", str(path), "--out", str(out), "--dry-run"]) == 0
    assert "no train step of layerscale at depth 1" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["cost-cpu-2.x.csv"]  # a dry run writes nothing


def test_the_dry_run_names_the_claim_rounds_a_suite_may_add(write_suite, tmp_path: Path, capsys):
    """Claim rounds train up to `sequential.max_seeds` report seeds for the rows of claims still open: a cost the
    time left cannot count yet, so the plan says it; with max_seeds at the report seeds, there are none."""
    matrix = {"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0]}
    claims = [{"layer": "rezero", "beats": "layernorm", "depth": 1}]
    path = write_suite(name="cr", matrix=matrix, report_seeds=[100, 101], claims=claims,
                       sequential={"max_seeds": 6})
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "claim rounds: then each claim still open" in text and "up to 2 rounds (seeds [102, 103, 104, 105]" in text
    none = write_suite(name="cr", matrix=matrix, report_seeds=[100, 101], claims=claims, sequential={"max_seeds": 2})
    assert main(["run", str(none), "--out", str(tmp_path / "b"), "--dry-run"]) == 0
    assert "claim rounds" not in capsys.readouterr().out
