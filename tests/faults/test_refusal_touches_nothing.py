"""Faults, second round (11): a refused recipe change touches nothing, even where a run would repair or replay: a
spooled MLflow summary stays spooled (its run stays as it was) and a torn journal tail is neither cut nor saved to a
`.damaged` file. The folder's own suite then does both, as before."""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from normbench.cli import main
from tests.faults.helpers import assert_invariants, trials

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def _snapshot(folder) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


def test_a_refused_recipe_change_replays_no_spool_and_cuts_no_journal(write_suite, tmp_path, capsys,
                                                                      one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    run_id = trials(out, "tiny")[0].user_attrs["mlflow_run_id"]
    spool = out / "mlflow-spool" / f"{run_id}.json"  # as a tracking outage past the budget leaves one
    spool.parent.mkdir()
    spool.write_text(json.dumps({"run_id": run_id, "metrics": [["spooled", 1.0, 0, 0]], "status": "ok"}))
    with open(out / "ledger.journal", "ab") as f:  # a process killed mid-write
        f.write(b'{"op_code":5,"worker_id":"w","trial_id":0,"user_a')
    before = _snapshot(out)
    capsys.readouterr()

    changed = write_suite(train={"epochs": 2, "batch_size": 256, "warmup_epochs": 0})
    assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "changed since the cells in this ledger" in err and "Traceback" not in err
    assert "torn last record" not in err
    assert _snapshot(out) == before  # no replay, no cut, no .damaged: byte for byte and mtime as it was
    assert not (out / "ledger.journal.damaged").exists()

    # the folder's own recipe, one cell more (a run that writes): it replays the spool and cuts the torn tail
    grown = write_suite(matrix={"depth": [1], "layer": ["layernorm", "layerscale", "rezero"], "lr": [1e-3],
                                "seed": [0]})
    assert main(["run", str(grown), "--out", str(out), "--quiet"]) == 0
    assert "torn last record" in capsys.readouterr().err
    assert not spool.exists() and (out / "ledger.journal.damaged").exists()
    assert "spooled" in MlflowClient(f"sqlite:///{out / 'mlflow.db'}").get_run(run_id).data.metrics
    assert_invariants(out, "tiny", [*CELLS, "depth=1,layer=rezero,lr=0.001,seed=0"])
