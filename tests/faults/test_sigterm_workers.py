"""Faults, second round (10): SIGTERM (SLURM's scancel, a pod stop) to the parent of `run --workers 2` releases every
claim before it exits: no trial or MLflow run left RUNNING, wherever the signal lands in a cell (training, logging
its result, closing its run); one resume line, the parent's, with the user's command; none from the workers."""

from __future__ import annotations

import signal

from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.cli import main
from normbench.errors import Terminated
from normbench.tracking.tracker import Tracker
from tests.faults.helpers import assert_invariants, finish, normbench, trials, wait_for

LAYERS = ["layernorm", "layerscale", "rezero"]
CELLS = [f"depth=1,layer={layer},lr=0.001,seed=0" for layer in LAYERS]
SLOW = {"epochs": 15, "batch_size": 64, "warmup_epochs": 0}


def _running_runs(out) -> list[str]:
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    return [r.info.run_name for r in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")]


def _states(out) -> list[TrialState]:
    return [t.state for t in trials(out, "tiny")]


def test_sigterm_to_the_parent_of_two_workers_releases_every_claim_with_one_resume_line(write_suite, tmp_path):
    """Sent as a worker finishes a cell while the other trains: the moment a worker is logging a result."""
    path = write_suite(train=SLOW, matrix={"depth": [1], "layer": LAYERS, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    proc = normbench("run", path, "--out", out, "--quiet", "--workers", "2")
    wait_for(lambda: TrialState.COMPLETE in _states(out) and TrialState.RUNNING in _states(out), timeout=240,
             step=0.05, what="a cell finished while another trains")
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, timeout=120)
    assert code == 143, err
    assert err.count("Resume with the same command") == 1, err
    assert f"normbench run {path} --out {out} --quiet --workers 2" in err
    assert "normbench worker" not in err and "--mode run" not in err, err  # no internal command named
    assert TrialState.RUNNING not in _states(out)
    assert not _running_runs(out)
    assert finish(normbench("run", path, "--out", out, "--quiet"))[0] == 0
    assert_invariants(out, "tiny", CELLS)


def _stopped_in(monkeypatch, method: str) -> None:
    """SIGTERM landing inside Tracker.`method` of the first cell: what the signal handler raises there."""
    real, hit = getattr(Tracker, method), []

    def stopped(self, *args, **kwargs):
        if not hit:
            hit.append(method)
            raise Terminated()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Tracker, method, stopped)


def test_sigterm_while_a_result_is_logged_gives_the_cell_back(write_suite, tmp_path, capsys, monkeypatch,
                                                              one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    _stopped_in(monkeypatch, "summarize")  # trained, its summary not yet in MLflow nor the ledger
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 143
    assert "Traceback" not in capsys.readouterr().err
    assert TrialState.RUNNING not in _states(out) and TrialState.COMPLETE not in _states(out)
    assert not _running_runs(out)  # closed KILLED, queued again
    monkeypatch.undo()
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert_invariants(out, "tiny", CELLS[:2])


def test_sigterm_while_a_recorded_cell_closes_its_run_keeps_the_cell(write_suite, tmp_path, capsys, monkeypatch,
                                                                     one_torch_thread):
    path, out = write_suite(), tmp_path / "out"
    _stopped_in(monkeypatch, "close")  # the ledger has the cell; its MLflow run is not closed yet
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 143
    assert "Traceback" not in capsys.readouterr().err
    assert _states(out).count(TrialState.COMPLETE) == 1 and TrialState.RUNNING not in _states(out)
    assert not _running_runs(out)  # closed FINISHED: the cell is recorded, not trained again
    monkeypatch.undo()
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert_invariants(out, "tiny", CELLS[:2])
