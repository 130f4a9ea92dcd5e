"""Faults, second round (11): a refused recipe change touches nothing, even where a run would repair: a torn journal
tail is neither cut nor saved to a `.damaged` file, and the MLflow store is not opened. The folder's own suite then
repairs it, as before."""

from __future__ import annotations

from normbench.cli import main
from tests.faults.helpers import assert_invariants

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def _snapshot(folder) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


def test_a_refused_recipe_change_opens_no_mlflow_store_and_cuts_no_journal(write_suite, tmp_path, capsys,
                                                                           one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    with open(out / "ledger.journal", "ab") as f:  # a process killed mid-write
        f.write(b'{"op_code":5,"worker_id":"w","trial_id":0,"user_a')
    before = _snapshot(out)
    capsys.readouterr()

    changed = write_suite(train={"epochs": 2, "batch_size": 256, "warmup_epochs": 0})
    assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "changed since the cells in this ledger" in err and "Traceback" not in err
    assert "torn last record" not in err
    assert _snapshot(out) == before  # no cut, no .damaged, mlflow.db untouched: byte for byte and mtime as it was
    assert not (out / "ledger.journal.damaged").exists()

    # the folder's own recipe, one cell more (a run that writes): it cuts the torn tail
    grown = write_suite(matrix={"depth": [1], "layer": ["layernorm", "layerscale", "rezero"], "lr": [1e-3],
                                "seed": [0]})
    assert main(["run", str(grown), "--out", str(out), "--quiet"]) == 0
    assert "torn last record" in capsys.readouterr().err
    assert (out / "ledger.journal.damaged").exists()
    assert_invariants(out, "tiny", [*CELLS, "depth=1,layer=rezero,lr=0.001,seed=0"])
