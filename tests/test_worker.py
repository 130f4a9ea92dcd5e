"""The worker's account of its time: training against the ledger's and MLflow's bookkeeping."""

from __future__ import annotations

import re

from normbench.cli import main
from normbench.worker import WorkSummary


def test_bookkeeping_is_the_busy_time_not_spent_training():
    summary = WorkSummary(cells_run=2, busy_seconds=50.0, train_seconds=49.0)
    summary.add(WorkSummary(cells_run=1, errors=1, busy_seconds=30.0, train_seconds=29.8))
    assert (summary.cells_run, summary.errors) == (3, 1)
    assert summary.bookkeeping() == "ledger + MLflow: 1.2 s of 80.0 s (1.5%)"
    assert WorkSummary().bookkeeping() == ""  # this process ran no cell


def test_a_run_reports_its_bookkeeping_share(write_suite, tmp_path, capsys):
    path = write_suite()
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    line = re.search(r"ledger \+ MLflow: ([\d.]+) s of ([\d.]+) s \(([\d.]+)%\)", capsys.readouterr().err)
    assert line is not None
    spent, busy, share = map(float, line.groups())
    assert 0 < spent <= busy and 0 < share < 100  # shown to 0.1 s, so no closer check on tiny cells
