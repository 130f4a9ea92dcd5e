"""What the parent of local workers sees of a worker that dies (exit code or signal, its last stderr lines, the
node) reaches the attempts of the cell it held, whoever counts the attempt; the parent replaces a worker that died
holding a cell while cells remain or a peer works; `--dry-run` shows a cell failed for good as such, not as "to run"."""

from __future__ import annotations

import re
import signal
import sys
import textwrap

import optuna
from optuna.trial import TrialState

from normbench.contracts.suite import load_suite
from normbench.store.attempts import ATTEMPTS, WORKER_EXIT, failed_for_good, reclaim
from normbench.store.ledger import Ledger, worker_host
from normbench.sweep.dry_run import dry_run_report
from normbench.sweep.worker_exits import WorkerProcess, after_exit, died, exit_words

AXES = {"depth": 1, "layer": "layernorm", "lr": 1e-3, "seed": 0}
CELL = "depth=1,layer=layernorm,lr=0.001,seed=0"
# A worker (as the worker loop does: reclaim, then claim) that says why it is about to die, and dies as the OOM
# killer would leave it.
DIES_HOLDING_A_CELL = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from normbench.store.attempts import reclaim
    from normbench.store.ledger import Ledger
    ledger = Ledger(None, Path(sys.argv[1]))
    study = ledger.study("run:tiny")
    reclaim(ledger, study)
    if ledger.claim(study) is None:
        sys.exit(0)
    print("CUDA out of memory (pretend)", file=sys.stderr, flush=True)
    os._exit(137)
""")


def test_exit_words_name_the_signal():
    assert exit_words(-9) == "killed by SIGKILL (signal 9)"
    assert exit_words(137).startswith("exit code 137 (128 + SIGKILL")
    assert exit_words(1) == "exit code 1"


def test_a_worker_that_dies_holding_a_cell_is_noted_on_its_attempts_and_replaced(tmp_path, capfd):
    peer = Ledger(None, tmp_path, max_attempts=2)
    study = peer.study("run:tiny")
    peer.enqueue(study, {CELL: AXES})
    proc = WorkerProcess([sys.executable, "-c", DIES_HOLDING_A_CELL, str(tmp_path)], env=None)
    assert proc.wait(timeout=120) == 137 and died(proc)
    assert "CUDA out of memory (pretend)" in capfd.readouterr().err  # forwarded to the parent's stderr
    double = after_exit(proc, peer, ["run:tiny"])  # noted; its cell is still RUNNING: a replacement starts
    assert double is not None and double.wait(timeout=120) == 137  # it counted the first attempt, claimed, died
    [first] = study.get_trials(deepcopy=False)[-1].user_attrs[ATTEMPTS]  # noted before it was counted
    assert first["pid"] == proc.pid and first["exit_code"] == 137 and first["node"] == worker_host()
    assert first["stderr"] == "CUDA out of memory (pretend)" and first["verdict"].endswith(exit_words(137))
    reclaim(peer, study)  # a peer counts the second attempt (the last) before the parent has noted the death
    assert after_exit(double, peer, ["run:tiny"]) is None  # no cell left, no peer at work: no replacement
    # a peer still at work may queue the next stage (the dead worker's cell may have been this one's last): one
    # replacement shares it; with nothing to claim yet, it exits at once
    third = after_exit(double, peer, ["run:tiny"], peers_alive=True)
    assert third is not None and third.wait(timeout=120) == 0
    [record] = failed_for_good(study)
    attempts = record.user_attrs[ATTEMPTS]  # the second death, noted after the record was written: merged
    assert [a["pid"] for a in attempts] == [proc.pid, double.pid]
    assert attempts[1]["exit"] == exit_words(137) and attempts[1]["stderr"] == "CUDA out of memory (pretend)"


def test_a_worker_stopped_by_us_or_ending_on_its_own_is_not_a_death(tmp_path):
    ledger = Ledger(None, tmp_path)
    study = ledger.study("run:tiny")
    ledger.enqueue(study, {"depth=2": {**AXES, "depth": 2}})  # a cell left: a death would get a replacement
    for code in (0, 1, 2, 3, 128 + signal.SIGINT, 128 + signal.SIGTERM):
        proc = WorkerProcess([sys.executable, "-c", f"import sys; sys.exit({code})"], env=None)
        proc.wait(timeout=60)
        study.add_trial(optuna.trial.create_trial(state=TrialState.RUNNING, user_attrs={  # the cell it held
            "cell_id": CELL, "axes": AXES, "worker_host": worker_host(), "worker_pid": proc.pid}))
        assert not died(proc) and after_exit(proc, ledger, ["run:tiny"]) is None
    assert not [key for key in study.user_attrs if key.startswith(WORKER_EXIT)]  # no exit noted as a death


def test_dry_run_shows_a_cell_failed_for_good(write_suite, tmp_path):
    suite = load_suite(write_suite())
    out = tmp_path / "out"
    peer = Ledger(None, out, max_attempts=1)
    study = peer.study("run:tiny")
    cells = {c.cell_id: c.axes for c in suite.cells()}
    peer.enqueue(study, cells)
    dead = Ledger(None, out)
    poison = dead.claim(dead.study("run:tiny")).user_attrs["cell_id"]
    dead.close()
    reclaim(peer, study)
    report = dry_run_report(suite, out, None)
    assert re.search(rf"^{re.escape(poison)}\s+failed for good \(1 attempts\)$", report, re.MULTILINE), report
    assert "1 failed for good (`normbench run --retry-failed`" in report
    assert sum("to run" in line for line in report.splitlines()) == len(cells) - 1
