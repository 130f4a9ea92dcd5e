"""scripts/publish_in_progress.py: a finished sweep moves from results/in-progress/ to results/ with its leaderboard
regenerated there and its queue line gone; one with cells left (or about to be queued) is refused, nothing moved."""

from __future__ import annotations

import importlib.util
import os

import yaml

from normbench.cli import main as normbench
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("publish_in_progress", REPO / "scripts" / "publish_in_progress.py")
publish_in_progress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(publish_in_progress)


def test_a_finished_sweep_is_published_and_one_with_cells_left_is_refused(write_suite, tmp_path, monkeypatch,
                                                                         capsys, one_torch_thread):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    suite = write_suite("tiny", train={"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
                        report_seeds=[100])
    folder = tmp_path / "results" / "in-progress" / "tiny"
    queue = folder.parent / "queue.txt"
    assert normbench(["run", str(suite), "--out", "results/in-progress/tiny", "--quiet"]) == 0
    queue.write_text(f"# in progress\n{suite} results/in-progress/tiny\n{suite} results/in-progress/other\n")

    grown = yaml.safe_load((folder / "suite.yaml").read_text())  # a row added to the matrix: two cells to train
    grown["matrix"]["layer"].append("rezero")
    (folder / "suite.yaml").write_text(yaml.safe_dump(grown, sort_keys=False))
    assert publish_in_progress.main(["tiny"]) == 2
    assert "tiny has 1 cell(s) left to train" in capsys.readouterr().err  # its matrix cell; the report seed follows
    assert folder.is_dir() and not (tmp_path / "results" / "tiny").exists()

    grown["matrix"]["layer"].pop()
    (folder / "suite.yaml").write_text(yaml.safe_dump(grown, sort_keys=False))
    assert publish_in_progress.main(["tiny"]) == 0
    published = tmp_path / "results" / "tiny"
    assert {"ledger.journal", "suite.yaml", "leaderboard.md", "results.csv"} <= {p.name for p in published.iterdir()}
    assert "report" in (published / "results.csv").read_text()  # its report seed's cell, as the ledger holds it
    assert not folder.exists() and queue.read_text() == f"# in progress\n{suite} results/in-progress/other\n"
    assert publish_in_progress.main(["tiny"]) == 2  # nothing in progress by that name any more


def read_line(fd: int) -> str:
    """One line from `fd`, a byte at a time, as bash's `read` leaves a regular file's offset: right after the line."""
    line = b""
    while not line.endswith(b"\n") and (byte := os.read(fd, 1)):
        line += byte
    return line.decode()


def test_dropping_a_queue_line_leaves_a_reader_in_the_middle_of_the_queue_its_lines(tmp_path):
    """scripts/resume-in-progress.sh reads the queue line by line while a finished sweep is published: the line after
    the one it is on must come next, whole."""
    queue = tmp_path / "queue.txt"
    queue.write_text("suites/a.yaml results/in-progress/a\nsuites/b.yaml results/in-progress/b\n"
                     "suites/c.yaml results/in-progress/c\n")
    fd = os.open(queue, os.O_RDONLY)
    try:
        assert read_line(fd).startswith("suites/a.yaml")
        assert read_line(fd).startswith("suites/b.yaml")   # the resume script is on b when a is published
        assert publish_in_progress.drop_queue_line(queue, "results/in-progress/a")
        assert read_line(fd) == "suites/c.yaml results/in-progress/c\n"
    finally:
        os.close(fd)
    assert queue.read_text().splitlines() == ["suites/b.yaml results/in-progress/b",
                                              "suites/c.yaml results/in-progress/c"]
