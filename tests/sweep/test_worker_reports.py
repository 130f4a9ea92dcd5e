"""Every trained cell reports its per-epoch val top-1 to its trial (optuna-dashboard's intermediate values), also
in `normbench run`, where nothing is pruned; the ledger reads, repairs and re-queues such trials as before."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from normbench.contracts.suite import load_suite
from normbench.store.journal import repair
from normbench.store.ledger import Ledger, requeue
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_jobs
from normbench.sweep.worker import TRAINED, run_cell


class _NoTracking:
    """MLflow is not what this test is about: a tracker that records nothing."""

    spool_dir = None

    def start(self, run):
        return "run"

    def __getattr__(self, name):  # log_epoch, log_telemetry, summarize, close
        return lambda *args, **kwargs: None


def test_run_cells_report_each_epochs_val_to_their_trial(write_suite, tmp_path, one_torch_thread):
    suite = load_suite(write_suite(name="iv", train={"epochs": 2, "batch_size": 256, "warmup_epochs": 0},
                                   matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0, 1]}))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    job = run_jobs(suite, study, ledger).jobs()[0]
    while (claim := ledger.claim(job.study)) is not None:
        outcome, _ = run_cell(job, claim, ledger=ledger, tracker=_NoTracking(), device="cpu",
                              progress=Progress(total=2, quiet=True), suite_name="iv")
        assert outcome == TRAINED

    study = Ledger(None, tmp_path).study("run:iv")
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, "reporting prunes nothing in a run"
    for t in trials:
        # keyed by optimizer steps, the leaderboard's learning-speed unit: 1077 // 256 = 4 steps an epoch
        history = {h["step"]: h["val_top1"] for h in t.user_attrs["history"]}
        assert t.intermediate_values == pytest.approx(history) and sorted(history) == [4, 8]
        assert t.value == pytest.approx(history[8])  # the value stays the final epoch's val, as selection reads it
        assert t.user_attrs["test_top1"] == t.user_attrs["result"]["test_top1"]  # a number the dashboard shows
    journal = tmp_path / "ledger.journal"
    assert repair(journal) == (len(journal.read_bytes().splitlines()), 0)  # every record intact

    requeue(study, trials[0])  # a cell given back (Ctrl-C, a lost worker) starts with no stale curve
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].intermediate_values == {}
