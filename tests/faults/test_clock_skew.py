"""Faults, third round: two PostgreSQL workers whose wall clocks are an hour ahead and an hour behind (a host whose
NTP is broken: its wall clock off, its monotonic clock true; tests/faults/skewed_clock/sitecustomize.py shifts what
the processes read as the time). Heartbeats and their staleness are the database's clock (Optuna's `now()`),
normbench's waits and graces monotonic: both workers exit once every cell is COMPLETE, each cell exactly once, within
a bound.

The hang the issue saw (a worker at +1 h in a futex wait, under libfaketime, once every cell was COMPLETE) is
libfaketime's: with Python 3.11 it turns a timed wait's deadline into one decades away (or, told to leave the
monotonic clock alone, makes `time.sleep` fail with EINVAL); docs/faults.md gives the evidence."""

from __future__ import annotations

import datetime
import os
import time

from optuna.trial import TrialState

from tests.conftest import REPO
from tests.faults.helpers import FAST_HEARTBEAT, assert_invariants, finish, normbench, trials

LAYERS = ["layernorm", "layerscale", "rezero"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]
BOUND_S = 420
SKEWED = str(REPO / "tests" / "faults" / "skewed_clock")


def _skewed(seconds: int) -> dict[str, str]:
    return {**FAST_HEARTBEAT, "NORMBENCH_TEST_CLOCK_SKEW": str(seconds), "NORMBENCH_HOST": f"node{seconds:+d}",
            "PYTHONPATH": os.pathsep.join(p for p in (SKEWED, os.environ.get("PYTHONPATH")) if p)}


def test_workers_an_hour_ahead_and_an_hour_behind_finish_every_cell_exactly_once(write_suite, tmp_path,
                                                                                fresh_postgres_url):
    path = write_suite(train={"epochs": 8, "batch_size": 64, "warmup_epochs": 0},
                       matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out, url = tmp_path / "out", fresh_postgres_url
    started = time.monotonic()
    workers = [normbench("worker", path, "--out", out, "--storage", url, "--quiet", env=_skewed(skew))
               for skew in (3600, -3600)]
    try:
        ends = [finish(w, timeout=max(1.0, BOUND_S - (time.monotonic() - started))) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [code for code, _ in ends] == [0, 0], ends  # both exit once every cell is COMPLETE
    done = [t for t in trials(out, "tiny", url) if t.state == TrialState.COMPLETE]
    now = datetime.datetime.now()
    starts = sorted((t.datetime_start - now).total_seconds() for t in done)
    assert starts[0] < -1800 or starts[-1] > 1800, starts  # claimed on a skewed clock (Optuna's datetime_start)
    assert finish(normbench("leaderboard", out, "--storage", url))[0] == 0
    assert_invariants(out, "tiny", CELLS, storage=url)
