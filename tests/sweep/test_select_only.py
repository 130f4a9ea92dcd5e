"""`--select-only` (sweep/plan.py `choosing_only`): a run trains the cells that choose (matrix, bracketing rounds,
tune's searches and confirmations) and none that score the folder, which wait queued for a run without the flag: a
lent GPU helps a CPU folder choose while the cells compared across folders stay on one device class."""

from __future__ import annotations

from optuna.trial import TrialState

from normbench.cli import main
from normbench.contracts.names import StudyNames
from normbench.contracts.suite import load_suite
from normbench.store.ledger import Ledger
from normbench.sweep.launch import worker_command

STAGES = {"matrix": {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3, 3e-3], "seed": [0]},
          "report_seeds": [100, 101], "budget_check": True}


def states(ledger: Ledger, name: str) -> list[TrialState]:
    return [t.state for t in ledger.study(name).get_trials(deepcopy=False)]


def test_a_select_only_run_leaves_every_scoring_cell_queued_for_the_next_run(write_suite, tmp_path, capsys):
    path = write_suite(name="so", **STAGES)
    out, names = tmp_path / "out", StudyNames("so")
    # two local workers, as a lease's fused workers per GPU: each worker process is given the flag too
    assert main(["run", str(path), "--out", str(out), "--quiet", "--select-only", "--workers", "2"]) == 0
    assert "--select-only: 8 cell(s) that score the folder" in capsys.readouterr().err  # said even with --quiet
    ledger = Ledger(None, out)
    assert states(ledger, names.run) == [TrialState.COMPLETE] * 4
    # the report stage was queued when it came due (as the run without the flag queues it), and none of it trained
    assert states(ledger, names.report) == [TrialState.WAITING] * 4
    assert states(ledger, names.budget) == [TrialState.WAITING] * 4  # 2 rows x 2 report seeds at 2x the epochs

    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0  # the CPU's run: what scores, and only that
    ledger = Ledger(None, out)
    assert states(ledger, names.run) == [TrialState.COMPLETE] * 4  # no selection cell trained twice
    assert states(ledger, names.report) == [TrialState.COMPLETE] * 4
    assert states(ledger, names.budget) == [TrialState.COMPLETE] * 4


def test_a_select_only_tune_searches_and_confirms_but_leaves_the_re_runs(write_suite, tmp_path, one_torch_thread):
    path = write_suite(name="st", matrix={"depth": [1], "layer": ["layernorm"], "seed": [0]},
                       report_seeds=[100, 101],
                       tune={"trials": 2, "confirm_top": 1, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    out, names = tmp_path / "out", StudyNames("st")
    assert main(["tune", str(path), "--out", str(out), "--quiet", "--select-only"]) == 0
    ledger = Ledger(None, out)
    assert states(ledger, names.tune("depth=1,layer=layernorm")) == [TrialState.COMPLETE] * 2
    assert states(ledger, names.confirm) == [TrialState.COMPLETE]
    assert set(states(ledger, names.tuned)) == {TrialState.WAITING}


def test_a_suite_whose_selection_cells_score_it_is_refused(write_suite, tmp_path, capsys):
    """Without report seeds the matrix's cells are the scores: --select-only would train them, not leave them."""
    path = write_suite(name="nr", matrix=STAGES["matrix"])
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--select-only"]) == 2
    assert "has no `report_seeds`: its selection cells score it" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_local_workers_inherit_select_only(write_suite, tmp_path):
    suite = load_suite(write_suite(name="w", **STAGES))
    with_flag = worker_command(suite, tmp_path, storage=None, device="cpu", mode="run", select_only=True)
    assert "--select-only" in with_flag
    assert "--select-only" not in worker_command(suite, tmp_path, storage=None, device="cpu", mode="run")


def test_a_select_only_runs_progress_counts_only_the_cells_it_trains(write_suite, tmp_path, capsys, one_torch_thread):
    import re

    from normbench.sweep.suite_run import SuiteRun

    path = write_suite(name="sp", **STAGES)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--select-only", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert {int(n) for n in re.findall(r"\[\d+/(\d+)\]", err)} == {4}, err  # the 4 selection cells, not 4 + 8
    assert "report stage queued (4 cells), left for a run without --select-only" in err
    # a later select-only run: the scoring cells queued by then are out of its total (and its ETA) from the start
    suite = load_suite(path)
    assert SuiteRun(suite, out, quiet=True, select_only=True).progress.total == 4
    assert SuiteRun(suite, out, quiet=True).progress.total == 12


def test_a_select_only_tunes_progress_leaves_out_its_re_runs(write_suite, tmp_path):
    from normbench.sweep.suite_run import SuiteRun

    path = write_suite(name="sq", matrix={"depth": [1], "layer": ["layernorm", "layerscale"], "seed": [0]},
                       report_seeds=[100, 101],
                       tune={"trials": 3, "confirm_top": 1, "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}}})
    suite = load_suite(path)
    searches_and_confirmations = 2 * 3 + 2 * 1
    assert SuiteRun(suite, tmp_path / "a", mode="tune", quiet=True, select_only=True).progress.total \
        == searches_and_confirmations
    assert SuiteRun(suite, tmp_path / "b", mode="tune", quiet=True).progress.total \
        == searches_and_confirmations + 2 * 2  # the re-runs: 2 searches x 2 report seeds
