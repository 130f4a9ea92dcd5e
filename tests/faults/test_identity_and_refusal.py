"""A cell's identity does not depend on the order of the suite's keys; a refused run changes nothing on disk."""

from __future__ import annotations

import os

from normbench.cli import main
from normbench.contracts.suite import cell_id
from tests.faults.helpers import assert_invariants

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def test_cell_id_sorts_its_axes():
    assert cell_id({"seed": 0, "layer": "rezero", "depth": 2}) == cell_id({"depth": 2, "layer": "rezero", "seed": 0})
    # sorted by name, as every ledger's ids are written (an order of its own, applied alike to both, is not enough)
    assert cell_id({"seed": 0, "layer": "rezero", "depth": 2}) == "depth=2,layer=rezero,seed=0"
    assert cell_id({"lr": 1e-3, "depth": 12}) == "depth=12,lr=0.001"


def test_reordering_the_matrix_keys_runs_nothing_again(write_suite, tmp_path, capsys, one_torch_thread):
    out = tmp_path / "out"
    matrix = {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3], "seed": [0]}
    assert main(["run", str(write_suite(matrix=matrix)), "--out", str(out), "--quiet"]) == 0
    reordered = write_suite(matrix=dict(reversed(list(matrix.items()))))
    assert main(["run", str(reordered), "--out", str(out), "--quiet"]) == 0
    assert_invariants(out, "tiny", CELLS)
    capsys.readouterr()
    assert main(["run", str(reordered), "--out", str(out), "--dry-run"]) == 0
    listing = capsys.readouterr().out
    assert "to run" not in listing and "2 cells, 2 finished" in listing


def test_a_refused_recipe_change_changes_nothing_in_the_output_folder(write_suite, tmp_path, capsys,
                                                                      one_torch_thread):
    out = tmp_path / "out"
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 0
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    changed = write_suite(train={"epochs": 2, "batch_size": 256, "warmup_epochs": 0})
    assert main(["run", str(changed), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "changed since the cells in this ledger" in err and "Traceback" not in err
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert "epochs: 1" in (out / "suite.yaml").read_text()
    assert os.path.getsize(out / "suite.yaml") > 0
