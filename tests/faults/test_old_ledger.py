"""Faults, second round (6): a journal ledger written by a normbench from before OS-lock claims (a claim with host and
pid, no `worker_lock`), its worker dead, re-run under another NORMBENCH_HOST: the claim is taken for dead after the
grace (store/migrations.py, version 3), so the run finishes instead of polling forever without a word."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from optuna.trial import TrialState

from tests.conftest import REPO
from tests.faults.helpers import FAST_HEARTBEAT, assert_invariants, finish, normbench, running, trials, wait_for

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]
SLOW = {"epochs": 40, "batch_size": 64, "warmup_epochs": 0}
# `normbench` as it signed claims before version 4: host and pid only
OLD_NORMBENCH = """
import os, sys
from normbench.store.ledger import Ledger, worker_host

def _sign(self, claim):
    claim.set_attr("worker_host", worker_host())
    claim.set_attr("worker_pid", os.getpid())

Ledger._sign = _sign
from normbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_old_claim_from_another_host_is_taken_for_dead_after_the_grace(write_suite, tmp_path):
    path, out = write_suite(train=SLOW), tmp_path / "out"
    old = subprocess.Popen([sys.executable, "-c", OLD_NORMBENCH, "run", str(path), "--out", str(out), "--quiet"],
                           cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", "NORMBENCH_HOST": "old-node"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: running(out, "tiny") and any("worker_pid" in t.user_attrs for t in trials(out, "tiny")),
             what="an old-format claim")
    os.kill(old.pid, signal.SIGKILL)
    old.wait()
    held = [t for t in trials(out, "tiny") if t.state == TrialState.RUNNING]
    assert held and all("worker_lock" not in t.user_attrs for t in held)  # a version-3 claim, its process dead

    code, err = finish(normbench("run", path, "--out", out, "--quiet",
                                 env={**FAST_HEARTBEAT, "NORMBENCH_HOST": "new-node"}), timeout=240)
    assert code == 0, err
    assert_invariants(out, "tiny", CELLS)
    attempts = [a for t in trials(out, "tiny") for a in t.user_attrs.get("attempts", [])]
    assert [a["host"] for a in attempts] == ["old-node"]
    assert "from before OS-lock claims" in attempts[0]["verdict"] and "new-node" in attempts[0]["verdict"]
