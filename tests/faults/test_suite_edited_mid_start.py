"""Faults, second round (12): a suite file edited while `run --workers 2` starts. Edited before the parent has
written anything: the parent refuses, nothing written. Edited later (after the parent opened the ledger, before its
workers start): the workers load the parent's snapshot of the file, so every cell trains with the recipe the ledger
was stamped with, and the edit is said once, not refused twice by the workers while the parent trains alone."""

from __future__ import annotations

import os

import yaml
from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.suite import load_suite
from normbench.sweep import suite_run
from tests.faults.helpers import assert_invariants, trials

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def _edit(path) -> None:
    suite = yaml.safe_load(path.read_text())
    suite["train"]["epochs"] = 2  # another recipe
    path.write_text(yaml.safe_dump(suite, sort_keys=False))


def test_an_edit_before_anything_is_written_is_refused_by_the_parent(write_suite, tmp_path, capsys, monkeypatch):
    path, out = write_suite(), tmp_path / "out"
    preflight = suite_run.preflight
    monkeypatch.setattr(suite_run, "preflight", lambda suite, device: (_edit(path), preflight(suite, device))[1])
    assert main(["run", str(path), "--out", str(out), "--workers", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: changed while this command was starting" in err and "Nothing was written" in err, err
    assert not out.exists()


def test_an_edit_after_the_ledger_is_open_trains_every_cell_with_the_parents_recipe(write_suite, tmp_path, capsys,
                                                                                    monkeypatch):
    path, out = write_suite(), tmp_path / "out"
    recipe = load_suite(path).recipe_hash()
    watch = suite_run.WorkerWatch  # made once the ledger is open and its cells queued, just before the workers start

    def edited_first(*args, **kwargs):
        _edit(path)
        return watch(*args, **kwargs)

    monkeypatch.setattr(suite_run, "WorkerWatch", edited_first)
    assert main(["run", str(path), "--out", str(out), "--workers", "2", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"{path} changed after this run read it") == 1, err
    assert "changed since the cells in this ledger" not in err, err  # no worker refused
    assert "Traceback" not in err
    assert_invariants(out, "tiny", CELLS)
    done = [t for t in trials(out, "tiny") if t.state == TrialState.COMPLETE]
    assert os.getpid() not in {t.user_attrs["worker_pid"] for t in done}  # trained by the workers, not the parent
    assert yaml.safe_load((out / "suite.yaml").read_text())["train"]["epochs"] == 1  # the recipe that ran
    assert load_suite(out / "suite.yaml").recipe_hash() == recipe

    monkeypatch.setattr(suite_run, "WorkerWatch", watch)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2  # the edit, checked by the next run
    assert "changed since the cells in this ledger" in capsys.readouterr().err
