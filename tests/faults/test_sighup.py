"""Faults, fourth round (issue 60, item 11): a hang-up (a closed terminal, a dropped ssh connection: SIGHUP to the
process group of `run --workers 2`) stops the run as SIGTERM does. It used to kill every process where it stood (exit
129, no checkpoint, two claims left RUNNING and counted as lost attempts). Now each cell in flight writes a checkpoint
at the stop and goes back to the queue uncounted, the parent prints one resume line and exits 143, and the same
command resumes the cells from those checkpoints."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from optuna.trial import TrialState

from normbench.store.attempts import ATTEMPTS, WORKER_EXIT
from normbench.store.ledger import Ledger
from tests.conftest import REPO
from tests.faults.helpers import as_from_a_terminal, assert_invariants, finish, normbench, trials, wait_for

LAYERS = ["layernorm", "layerscale", "rezero"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]
# cells of many epochs, so both are mid-way when the hang-up comes; a checkpoint only at a stop (the interval is an
# hour): a record on a queued copy is the stop's
TRAIN = {"epochs": 15, "batch_size": 64, "warmup_epochs": 0, "checkpoint_minutes": 60}


def _training(out) -> int:
    """How many claimed cells have reported an epoch: inside their training loop, past its start."""
    return sum(1 for t in trials(out, "tiny") if t.state == TrialState.RUNNING and t.intermediate_values)


def test_sighup_to_the_process_group_of_two_workers_stops_them_as_sigterm_does(write_suite, tmp_path):
    path = write_suite(train=TRAIN, matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    command = ["run", str(path), "--out", str(out), "--quiet", "--workers", "2"]
    # its own session, as a terminal's job: the hang-up reaches the parent and its workers alike
    proc = subprocess.Popen([sys.executable, "-m", "normbench", *command], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            start_new_session=True, preexec_fn=as_from_a_terminal)
    try:
        wait_for(lambda: _training(out) == 2, timeout=240, step=0.1, what="both workers training", alive=proc)
        os.killpg(proc.pid, signal.SIGHUP)
        code, err = finish(proc, timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 143, err  # the documented code of an interrupted run (was 129: killed by SIGHUP)
    assert err.count("Resume with the same command") == 1 and "stopped by SIGHUP" in err, err
    assert f"normbench {' '.join(command)}" in err

    ts = trials(out, "tiny")
    assert not [t for t in ts if t.state == TrialState.RUNNING]  # every claim given back
    assert not [t for t in ts if ATTEMPTS in t.user_attrs]  # none counted as a lost attempt
    assert not [k for k in Ledger(None, out).study("run:tiny").user_attrs if k.startswith(WORKER_EXIT)]  # none died
    stopped = [t for t in ts if t.state == TrialState.FAIL and t.intermediate_values]  # attempts stopped mid-cell
    assert stopped and not [t for t in stopped if "error" in t.user_attrs]
    copies = {t.system_attrs["retry_history"][-1]: t for t in ts
              if t.state == TrialState.WAITING and t.system_attrs.get("retry_history")}
    for t in stopped:  # each queued again with the checkpoint written at the stop, no older than its last epoch
        assert copies[t.number].user_attrs["checkpoint"]["step"] >= max(t.intermediate_values), t.number

    code, err = finish(normbench("run", path, "--out", out, "--quiet"))
    assert code == 0, err
    assert err.count("resumes from its checkpoint") == len(stopped), err
    assert_invariants(out, "tiny", CELLS)
