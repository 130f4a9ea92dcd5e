"""Faults, second round (5 and a smaller point): the journal's lock. A lock another process took over while this one
held it (a disk stalled past the lock's 30 s grace) ends the run cleanly with a message, its finished cell kept;
a lock left by a process killed while writing is waited for with one line of normbench's own, naming the lock and
how to clear it, then taken over."""

from __future__ import annotations

import json
import os

from optuna.trial import TrialState

from normbench.cli import main
from tests.faults.helpers import assert_invariants, trials

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def test_a_lock_taken_over_mid_write_ends_the_run_cleanly_and_keeps_the_cell(write_suite, tmp_path, capsys,
                                                                           monkeypatch, one_torch_thread):
    """While this run fsyncs the record that finishes its first cell, another process (its lock wait past the
    grace) forcibly releases the lock, as Optuna's does: it renames the link away."""
    path, out = write_suite(), tmp_path / "out"
    journal, lock = out / "ledger.journal", f"{out / 'ledger.journal'}.lock"
    real_fsync, taken = os.fsync, []

    def stalled(fd):
        if not taken and os.path.samefile(f"/proc/self/fd/{fd}", journal):
            last = json.loads(journal.read_bytes().splitlines()[-1])
            if last.get("state") == TrialState.COMPLETE.value:
                os.rename(lock, f"{lock}.taken-over")  # the other process's forcible release
                os.unlink(f"{lock}.taken-over")
                taken.append(last["trial_id"])
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", stalled)
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert taken and code == 2, err
    assert "Traceback" not in err and "did not possess lock" not in err, err
    assert f"{lock}: another process took the ledger's lock over while this one held it" in err, err
    assert "Every finished cell is recorded; run the same command to resume" in err
    ts = trials(out, "tiny")
    assert [t.state for t in ts if t._trial_id == taken[0]] == [TrialState.COMPLETE]  # the finished cell is kept
    assert TrialState.RUNNING not in [t.state for t in ts]

    monkeypatch.setattr(os, "fsync", real_fsync)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert_invariants(out, "tiny", CELLS)  # the kept cell was not trained again; its MLflow run is FINISHED once


def test_a_stale_lock_is_waited_for_with_one_line_of_our_own_then_taken_over(write_suite, tmp_path, capsys,
                                                                             monkeypatch, one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    lock = f"{out / 'ledger.journal'}.lock"
    os.symlink(out / "ledger.journal", lock)  # what a process killed -9 while appending leaves
    monkeypatch.setenv("NORMBENCH_JOURNAL_LOCK_GRACE", "8")  # Optuna's 30 s, shortened for the test
    capsys.readouterr()
    grown = write_suite(matrix={"depth": [1], "layer": ["layernorm", "layerscale", "rezero"], "lr": [1e-3],
                                "seed": [0]})
    assert main(["run", str(grown), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"waiting for the ledger's lock {lock}") == 1, err
    assert f"If no normbench process uses this folder, remove it now: rm {lock}" in err
    assert err.count(f"took over the ledger's lock {lock}") == 1, err
    assert "taking longer than" not in err and "Forcibly releasing" not in err  # no Optuna lines
    assert not os.path.lexists(lock)
    assert_invariants(out, "tiny", [*CELLS, "depth=1,layer=rezero,lr=0.001,seed=0"])
