"""Faults, third round: NORMBENCH_MAX_ATTEMPTS exhausted, then `--retry-failed` once the cause is gone. A layer kills
every worker that runs it while a marker file exists (the OOM a bad node causes); the run fails the cell for good
after NORMBENCH_MAX_ATTEMPTS workers died and exits 1. With the marker gone, `normbench run --retry-failed` trains it
once: exit 0, every cell exactly once, and neither the run nor the leaderboard says "failed for good" any more."""

from __future__ import annotations

from optuna.trial import TrialState

from tests.faults.helpers import FAST_HEARTBEAT, assert_invariants, finish, normbench, trials

PLUGIN = '''
import os
import sys

from torch import nn

import normbench


@normbench.register_layer("flaky_norm", kind="norm", formula="LayerNorm that kills its process while a file exists",
                          source="tests/faults/test_retry_after_failed_for_good.py")
class FlakyNorm(nn.LayerNorm):
    def forward(self, x):
        if os.path.exists(os.environ["FLAKY_MARKER"]):
            print("flaky_norm: killing this worker", file=sys.stderr, flush=True)
            os._exit(137)
        return super().forward(x)
'''


def _plugin(tmp_path):
    folder = tmp_path / "plugin"
    info = folder / "flaky_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (folder / "flaky_plugin.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flaky-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[normbench.layers]\nflaky = flaky_plugin\n")
    return folder


def _run(path, out, env, *extra):
    proc = normbench("run", path, "--out", out, "--workers", "2", "--quiet", *extra, env=env)
    try:
        return finish(proc, timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_cell_failed_for_good_trains_once_with_retry_failed_after_the_cause_is_fixed(write_suite, tmp_path):
    path = write_suite(matrix={"depth": [1], "layer": ["layernorm", "flaky_norm"], "lr": [1e-3], "seed": [0]})
    out, marker = tmp_path / "out", tmp_path / "bad-node"
    marker.touch()
    env = {**FAST_HEARTBEAT, "NORMBENCH_MAX_ATTEMPTS": "2", "PYTHONPATH": str(_plugin(tmp_path)),
           "FLAKY_MARKER": str(marker)}
    code, err = _run(path, out, env)
    flaky = "depth=1,layer=flaky_norm,lr=0.001,seed=0"
    assert code == 1 and "1 cell(s) failed for good" in err and flaky in err, err
    assert "## failed for good" in (out / "leaderboard.md").read_text()

    attempts = [t for t in trials(out, "tiny") if t.state == TrialState.FAIL and t.user_attrs.get("worker_pid")]
    assert len(attempts) == 2  # NORMBENCH_MAX_ATTEMPTS workers killed, then no more

    marker.unlink()  # the cause fixed
    code, err = _run(path, out, env, "--retry-failed")
    assert code == 0, err
    assert "failed for good" not in err, err
    assert "failed for good" not in (out / "leaderboard.md").read_text()
    assert_invariants(out, "tiny", ["depth=1,layer=layernorm,lr=0.001,seed=0", flaky])
