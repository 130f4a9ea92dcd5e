"""The worker loop across stages (sweep/worker.py): a stage queued already finished (every cell adopted from a donor
folder, sweep/adopt.py) is not the end of the suite; the worker asks for the stage after it. Seen in the frontier
sweep: a bracketing round whose 4 cells were all the modern folder's sent one of its two workers home, and the
report stage then trained on one."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from normbench.contracts.names import StudyNames
from normbench.contracts.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep import worker
from normbench.sweep.plan import Plan
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run_study, run_job
from normbench.tracking.tracker import Tracker


def finished_copy(study: optuna.Study, cell) -> None:
    """A cell queued finished, as an adopted donor record is."""
    study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=0.5,
                                        user_attrs={"cell_id": cell.cell_id, "axes": cell.axes}))


def test_a_stage_queued_finished_is_followed_by_the_next_not_taken_for_the_end(write_suite, tmp_path,
                                                                                one_torch_thread):
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]},
                                   report_seeds=[100]))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    finished_copy(study, suite.cells()[0])  # the matrix, adopted whole
    names, stages = StudyNames(suite.name), []
    report = suite.cell({**suite.cells()[0].axes, "seed": 100})

    def queue_next() -> None:  # as sweep/run.py queue_next_stage: one stage per call, once the one before is over
        if not stages:  # a bracketing round whose every cell a donor had: queued finished
            stages.append(ledger.study(names.bracket(1)))
            finished_copy(stages[-1], suite.cell({**report.axes, "seed": 0, "lr": 3.16e-3}))
        elif len(stages) == 1:  # then the report stage, which trains here
            stages.append(ledger.study(names.report))
            ledger.enqueue(stages[-1], {report.cell_id: report.axes})

    plan = Plan(jobs=lambda: [run_job(suite, s) for s in [study, *stages]], queue_next=queue_next)
    summary = worker.work(plan, Ledger(None, tmp_path), Tracker(tmp_path, suite.name), "cpu",
                          Progress(total=1, quiet=True), suite.name)
    assert summary.cells_run == 1
    [trained] = stages[1].get_trials(deepcopy=False)
    assert trained.state == TrialState.COMPLETE and trained.user_attrs["cell_id"] == report.cell_id


def test_a_queue_that_only_ever_adds_finished_records_ends(write_suite, tmp_path, monkeypatch):
    """A bound, not a hang: a plan whose every call queues one more finished record is called done after
    MAX_FINISHED_STAGES of them in a row."""
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}))
    ledger = Ledger(None, tmp_path)
    study = open_run_study(ledger, suite)
    calls = []

    def queue_next() -> None:
        calls.append(1)
        finished_copy(study, suite.cell({**suite.cells()[0].axes, "seed": len(calls)}))

    monkeypatch.setattr(worker, "MAX_FINISHED_STAGES", 3)
    plan = Plan(jobs=lambda: [run_job(suite, study)], queue_next=queue_next)
    summary = worker.work(plan, Ledger(None, tmp_path), Tracker(tmp_path, suite.name), "cpu",
                          Progress(total=1, quiet=True), suite.name)
    assert summary.cells_run == 0 and len(calls) == 4  # 3 followed, the 4th taken for the end
