"""Adopting cells (sweep/adopt.py): a suite with `adopt_from` copies the finished cells a donor folder trained under
its recipe instead of training them, through the matrix and the report stage; the copies equal what training them
here gives; a donor that cannot give this recipe's cells is refused with the fix, before anything is queued."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.names import ADOPTED_ATTR
from normbench.contracts.suite import parse_suite
from normbench.errors import SuiteError
from normbench.store.ledger import Ledger
from tests.sweep.test_runner import mlflow_runs

RECIPE = {"train": {"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
          "report_seeds": [100]}


def finished(out: Path, suite: str) -> dict[str, dict]:
    """`{(study kind, cell_id): trial}` of the folder's finished cells."""
    ledger = Ledger(None, out)
    return {(name.split(":")[0], t.user_attrs["cell_id"]): t for name in ledger.study_names()
            if name.split(":")[1] == suite for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE,))}


@pytest.fixture
def donor(write_suite, tmp_path, one_torch_thread) -> Path:
    out = tmp_path / "donor-out"
    path = write_suite("donor", matrix={"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3],
                                        "seed": [0]}, **RECIPE)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    return out


def test_a_donors_cells_are_copied_not_trained_and_equal_training_them_here(donor, write_suite, tmp_path, capsys):
    matrix = {"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0]}
    adopting = write_suite("frontier", matrix=matrix, adopt_from=[str(donor)], **RECIPE)
    out = tmp_path / "frontier-out"
    assert main(["run", str(adopting), "--out", str(out), "--dry-run"]) == 0  # says what the run will copy
    listed = capsys.readouterr().out
    assert f"depth=1,layer=layernorm,lr=0.001,seed=0  adopted from {donor} by the next run" in listed
    assert "2 cells, 0 finished, 1 to be adopted from donor folders (not trained)" in listed
    assert main(["run", str(adopting), "--out", str(out)]) == 0  # not quiet: its notes say what it adopted
    cells = finished(out, "frontier")
    adopted = {key for key, t in cells.items() if ADOPTED_ATTR in t.user_attrs}
    # layernorm's matrix cell and its report cell (queued from a selection that read the copy) came from the donor
    assert adopted == {("run", "depth=1,layer=layernorm,lr=0.001,seed=0"),
                       ("report", "depth=1,layer=layernorm,lr=0.001,seed=100")}
    assert len(cells) == 4  # rezero's two trained here
    donor_cells = finished(donor, "donor")
    for kind, cid in adopted:
        copy, source = cells[(kind, cid)], donor_cells[(kind, cid)]
        assert copy.user_attrs["result"] == source.user_attrs["result"]
        assert copy.value == source.value and copy.intermediate_values == source.intermediate_values
        assert copy.datetime_complete == source.datetime_complete
        assert copy.user_attrs[ADOPTED_ATTR] == {"folder": str(donor), "study": f"{kind}:donor",
                                                 "trial": source.number}
        assert "worker_pid" not in copy.user_attrs  # the donor's bookkeeping stays there
    assert "adopted 1 finished cell(s)" in capsys.readouterr().err  # the report stage's copy, said as it is taken
    board = (out / "leaderboard.md").read_text()
    assert f"- adopted: 2 cells (rows layernorm) from `{donor}`" in board
    tagged = [r for r in mlflow_runs(out, "frontier") if r.data.tags.get(ADOPTED_ATTR)]
    assert sorted(r.data.tags["cell_id"] for r in tagged) == sorted(cid for _, cid in adopted)

    # the premise: the same suite trained without a donor gives the copied numbers
    plain = write_suite("frontier", matrix=matrix, **RECIPE)
    fresh = tmp_path / "fresh-out"
    assert main(["run", str(plain), "--out", str(fresh), "--quiet"]) == 0
    trained = finished(fresh, "frontier")
    for key in adopted:
        assert trained[key].user_attrs["result"]["test_top1"] == cells[key].user_attrs["result"]["test_top1"]
        assert trained[key].intermediate_values == cells[key].intermediate_values


def test_a_donor_of_another_recipe_is_refused_before_anything_is_queued(donor, write_suite, tmp_path, capsys):
    longer = {**RECIPE, "train": {**RECIPE["train"], "epochs": 2}}
    path = write_suite("other", adopt_from=[str(donor)], **longer)
    out = tmp_path / "other-out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"adopt_from: {donor} holds no cells of this suite's recipe" in err and "Drop it from adopt_from" in err
    assert not out.exists() or "run:other" not in Ledger(None, out).study_names()


def test_a_donor_folder_without_a_ledger_is_refused_with_the_fix(write_suite, tmp_path, capsys):
    missing = tmp_path / "never-trained"
    path = write_suite("lonely", adopt_from=str(missing), **RECIPE)
    assert main(["run", str(path), "--out", str(tmp_path / "lonely-out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"adopt_from: {missing} holds no ledger" in err and "train that suite first" in err


def test_adopt_from_takes_a_path_or_a_list_of_paths():
    raw = {"name": "a", "dataset": {"name": "digits"}, "matrix": {"layer": ["layernorm"], "lr": [1e-3]}}
    assert parse_suite({**raw, "adopt_from": "results/x"}, Path("a.yaml")).adopt_from == ["results/x"]
    assert parse_suite({**raw, "adopt_from": ["results/x", "y"]}, Path("a.yaml")).adopt_from == ["results/x", "y"]
    assert parse_suite(raw, Path("a.yaml")).adopt_from == []
    for bad in (3, [""], {"folder": "x"}):
        with pytest.raises(SuiteError, match="adopt_from: expected an output folder's path"):
            parse_suite({**raw, "adopt_from": bad}, Path("a.yaml"))


def test_local_workers_adopt_the_stages_they_queue_and_the_parent_says_so(donor, write_suite, tmp_path, capsys):
    """With --workers 2 the report stage is queued by a worker process: it adopts the donor's report cell there, and
    the parent's progress notes it as adopted, not as a cell to train."""
    matrix = {"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0]}
    adopting = write_suite("frontier", matrix=matrix, adopt_from=[str(donor)], **RECIPE)
    out = tmp_path / "workers-out"
    capsys.readouterr()
    assert main(["run", str(adopting), "--out", str(out), "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "1 of the finished cells adopted from" in err  # the matrix's, when the run opened
    assert f"adopted 1 finished cell(s) of this recipe from {donor} instead of training them" in err  # the report's
    cells = finished(out, "frontier")
    assert sorted(k for k, t in cells.items() if ADOPTED_ATTR in t.user_attrs) == [
        ("report", "depth=1,layer=layernorm,lr=0.001,seed=100"), ("run", "depth=1,layer=layernorm,lr=0.001,seed=0")]
