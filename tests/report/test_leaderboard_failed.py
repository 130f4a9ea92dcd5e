"""The leaderboard's 'failed for good' section is written whether or not any cell finished: the exit line of a run
whose only cells failed for good sends the user there (issue 60, item 10)."""

from __future__ import annotations

from normbench.contracts.suite import load_suite
from normbench.report.leaderboard import write_leaderboard
from normbench.store.attempts import reclaim
from normbench.store.ledger import Ledger
from normbench.sweep.run import open_run_study


def test_a_folder_with_no_finished_cell_lists_the_cells_failed_for_good(write_suite, tmp_path):
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]}))
    out = tmp_path / "out"
    peer = Ledger(None, out, max_attempts=1)
    study = open_run_study(peer, suite)
    peer.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})
    worker = Ledger(None, out)
    assert worker.claim(worker.study(study.study_name)) is not None
    worker.close()  # the worker dies holding the cell: its OS lock is free
    assert len(reclaim(peer, study)) == 1  # the one attempt the limit allows: failed for good
    peer.close()

    board = write_leaderboard(out, suite=suite).read_text()
    assert "No finished cells yet." in board
    assert "## failed for good (1 attempts)" in board and "depth=1,layer=layernorm,lr=0.001,seed=0" in board
    assert "OS lock" in board  # the attempt's verdict
    assert board.index("## failed for good") < board.index("No finished cells yet.")
