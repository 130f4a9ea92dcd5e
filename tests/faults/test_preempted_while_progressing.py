"""Faults, fourth round (issue 60, item 10): a long cell preempted again and again (a spot instance, SLURM
`--requeue`), `kill -9` each time after its checkpoint moved on, is not the poison cell NORMBENCH_MAX_ATTEMPTS exists
for: three such kills with a limit of 3, then a plain `run` resumes the cell from its newest checkpoint and finishes
it (exit 0), every cell once; each preemption is kept on the cell's trials, none counted as a lost attempt."""

from __future__ import annotations

import signal

from optuna.trial import TrialState

from normbench.store.attempts import ATTEMPTS, PREEMPTED
from normbench.store.ledger import FAILED_FOR_GOOD
from tests.faults.helpers import assert_invariants, finish, normbench, trials, wait_for

CELL = "depth=2,layer=layerscale,lr=0.001,seed=0"
# ~0.7 s an epoch on one core, a checkpoint at each epoch's end: three kills land well before epoch 12
TRAIN = {"epochs": 12, "batch_size": 16, "warmup_epochs": 0, "checkpoint_minutes": 1e-6}
MATRIX = {"depth": [2], "layer": ["layerscale"], "lr": [1e-3], "seed": [0]}
# the limit the kills would exhaust; a journal lock a kill left behind is taken over in 3 s, not 30
ENV = {"NORMBENCH_MAX_ATTEMPTS": "3", "NORMBENCH_JOURNAL_LOCK_GRACE": "3"}
KILLS = 3


def _checkpoint_epoch(out) -> int:
    """The newest epoch a claimed (RUNNING) trial of the cell has a checkpoint of; -1 while none has."""
    records = [t.user_attrs.get("checkpoint") or {} for t in trials(out, "tiny") if t.state == TrialState.RUNNING]
    return max((r.get("epoch", -1) for r in records), default=-1)


def test_a_cell_killed_three_times_after_its_checkpoint_moved_resumes_and_finishes(write_suite, tmp_path):
    path, out = write_suite(train=TRAIN, matrix=MATRIX), tmp_path / "out"
    killed_at: list[int] = []  # the checkpoint's epoch at each kill
    for _ in range(KILLS):
        start = killed_at[-1] if killed_at else 0
        proc = normbench("run", path, "--out", out, "--quiet", env=ENV)
        try:
            wait_for(lambda start=start: _checkpoint_epoch(out) > start, timeout=240, step=0.05, alive=proc,
                     what=f"a checkpoint past epoch {start}")
            proc.send_signal(signal.SIGKILL)  # a spot instance gone: no handler runs, the claim stays RUNNING
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        killed_at.append(_checkpoint_epoch(out))  # the dead attempt's record
    assert killed_at == sorted(set(killed_at)) and killed_at[-1] < TRAIN["epochs"], killed_at

    code, err = finish(normbench("run", path, "--out", out, "--quiet", env=ENV))
    assert code == 0, err  # was 1: "1 cell(s) failed for good ... (OOM kill, segfault, watchdog?)", nothing trained
    assert "failed for good" not in err, err
    [resumed] = [line for line in err.splitlines() if "resumes from its checkpoint" in line]
    assert int(resumed.split("at epoch ")[1].split()[0].rstrip(":,")) >= killed_at[-1], resumed
    assert_invariants(out, "tiny", [CELL])

    ts = trials(out, "tiny")
    assert len([t for t in ts if t.state == TrialState.FAIL and t.user_attrs.get("worker_pid")]) == KILLS
    assert not [t for t in ts if t.user_attrs.get(FAILED_FOR_GOOD)]
    [done] = [t for t in ts if t.state == TrialState.COMPLETE]
    assert ATTEMPTS not in done.user_attrs  # no attempt counted against the limit
    preempted = done.user_attrs[PREEMPTED]
    assert len(preempted) == KILLS and all("preempted while progressing, not counted" in p["verdict"]
                                           for p in preempted), preempted
    assert "failed for good" not in (out / "leaderboard.md").read_text()
