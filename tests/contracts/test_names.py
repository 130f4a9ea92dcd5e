"""Study names and output paths are spelled in one place; these pin the spellings a published ledger holds."""

from __future__ import annotations

from pathlib import Path

from normbench.contracts.names import OutputFolder, StudyNames, suites_in


def test_study_names_match_the_ledger_format():
    names = StudyNames("depth36")
    assert names.run == "run:depth36"
    assert names.bracket(2) == "bracket:depth36:2"
    assert names.tune("depth=12,layer=layerscale") == "tune:depth36:depth=12,layer=layerscale"
    assert names.tuned == "tuned:depth36"


def test_bracket_rounds_sort_by_number_and_ignore_other_suites():
    names = StudyNames("s")
    present = ["bracket:s:10", "run:s", "bracket:s:2", "bracket:s-other:1", "bracket:s:x", "tune:s:depth=2"]
    assert names.bracket_rounds(present) == ["bracket:s:2", "bracket:s:10"]
    assert names.bracket_round("bracket:s:10") == 10
    assert names.bracket_round("bracket:s-other:1") is None


def test_tune_point_reads_back_what_tune_wrote():
    names = StudyNames("s")
    assert names.tune_point(names.tune("depth=6")) == "depth=6"
    assert names.tune_point("tuned:s") is None and names.tune_point("tune:t:depth=6") is None


def test_suites_in_lists_each_run_study_once():
    assert suites_in(["run:b", "bracket:b:1", "run:a", "tuned:c"]) == ["a", "b"]


def test_output_folder_paths():
    folder = OutputFolder("results/smoke")
    assert folder.path == Path("results/smoke")
    assert folder.ledger == Path("results/smoke/ledger.journal")
    assert folder.mlflow_db.name == "mlflow.db" and folder.locks.name == ".locks"
    assert folder.suite.name == "suite.yaml" and folder.leaderboard.name == "leaderboard.md"
    assert folder / "x.csv" == Path("results/smoke/x.csv")
    assert OutputFolder.telemetry_figure("stream_rms") == "telemetry_stream_rms.png"
    assert set(OutputFolder.WRITTEN) >= {"results.csv", "leaderboard.md", "ledger.journal", "mlflow.db"}
