"""A poison cell: its layer kills every worker that runs it (`os._exit(137)`, as the OOM killer or a segfault would).
The run fails it for good after NORMBENCH_MAX_ATTEMPTS attempts instead of feeding it to worker after worker, trains
the rest, exits non-zero naming it and `--retry-failed`, and the leaderboard lists its attempts, each with the exit
code, last stderr line and node the parent saw. With more attempts than workers the parent replaces the dead ones:
it never trains the cell itself (it would die with it, and say nothing)."""

from __future__ import annotations

from collections import Counter

from optuna.trial import TrialState

from normbench.store.attempts import ATTEMPTS, RETRY_ROUND, failed_for_good
from normbench.store.ledger import Ledger
from tests.faults.helpers import FAST_HEARTBEAT, assert_invariants, finish, normbench, trials

PLUGIN = '''
import os
import sys

from torch import nn

import normbench


@normbench.register_layer("poison_norm", kind="norm", formula="LayerNorm that kills its process",
                          source="tests/faults/test_poison_cell.py")
class PoisonNorm(nn.LayerNorm):
    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__(dim, eps=eps, device=device, dtype=dtype)

    def forward(self, x):
        print("poison_norm: killing this worker", file=sys.stderr, flush=True)
        os._exit(137)  # no traceback, no cleanup: what a SIGKILL from the OOM killer leaves
'''


def plugin_path(tmp_path):
    """A folder to put on PYTHONPATH: the module and the entry point (group normbench.layers) that loads it."""
    folder = tmp_path / "plugin"
    info = folder / "poison_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (folder / "poison_plugin.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: poison-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[normbench.layers]\npoison = poison_plugin\n")
    return folder


def run(path, out, env, *extra: str) -> str:
    """`normbench run` with two local workers; returns its stderr after checking it ends, with exit code 1, within
    a bound (a run that loops on the cell would not)."""
    proc = normbench("run", path, "--out", out, "--workers", "2", "--quiet", *extra, env=env)
    try:
        code, err = finish(proc, timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1, err
    return err


def cell_of(out, layer: str) -> str:
    return next(t.user_attrs["cell_id"] for t in trials(out, "poison") if t.user_attrs["axes"]["layer"] == layer)


def test_a_cell_that_kills_its_workers_is_failed_for_good_and_the_rest_trains(write_suite, tmp_path):
    path = write_suite(name="poison", matrix={"depth": [1], "layer": ["layernorm", "poison_norm"], "lr": [1e-3],
                                              "seed": [0]})
    out = tmp_path / "out"
    env = {**FAST_HEARTBEAT, "NORMBENCH_MAX_ATTEMPTS": "3", "PYTHONPATH": str(plugin_path(tmp_path))}
    err = run(path, out, env)  # 3 attempts, 2 workers: a third worker replaces a dead one
    good, poison = cell_of(out, "layernorm"), cell_of(out, "poison_norm")
    assert "failed for good" in err and poison in err and "--retry-failed" in err, err
    assert_invariants(out, "poison", [good])  # the normal cell once in the ledger, results.csv and MLflow
    study = Ledger(None, out).study("run:poison")
    assert not study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
    [record] = failed_for_good(study)
    attempts = record.user_attrs[ATTEMPTS]
    assert record.user_attrs["cell_id"] == poison and len(attempts) == 3
    assert all(a["host"] and a["pid"] and "OS lock" in a["verdict"] for a in attempts), attempts
    assert len({a["pid"] for a in attempts}) == 3  # each attempt took a different worker down
    assert all(a["exit_code"] == 137 and a["stderr"] == "poison_norm: killing this worker" and a["node"] == a["host"]
               for a in attempts), attempts  # what the parent saw of each death
    board = (out / "leaderboard.md").read_text()
    assert "## failed for good (3 attempts)" in board and poison in board and "exit code 137" in board

    env["NORMBENCH_MAX_ATTEMPTS"] = "2"
    err = run(path, out, env, "--retry-failed")  # another round: two more attempts, and it fails again
    assert "failed for good" in err and poison in err, err
    [record] = failed_for_good(study)
    assert record.user_attrs[RETRY_ROUND] == 1 and len(record.user_attrs[ATTEMPTS]) == 2
    lost = Counter(t.user_attrs["cell_id"] for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                   if t.user_attrs.get("worker_pid"))
    assert lost == {poison: 5}  # 3 + 2 attempts, each a worker killed
    assert_invariants(out, "poison", [good])  # the normal cell was not trained again
    assert not study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
    assert f"{poison} (retry 1)" in (out / "leaderboard.md").read_text()

    code, err = finish(normbench("worker", path, "--out", out, env=env))  # a node joining a suite with nothing left
    assert code == 0 and "1 cell(s) failed for good" in err and poison in err, err
