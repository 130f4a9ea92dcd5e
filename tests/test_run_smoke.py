"""scripts/run-smoke.sh (the README's run command) trains into the git-ignored runs/smoke/ and compares it with the
committed results/smoke/ (scripts/compare_smoke.py) instead of overwriting it."""

from __future__ import annotations

import importlib.util
import math

import pandas as pd

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("compare_smoke", REPO / "scripts" / "compare_smoke.py")
compare_smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_smoke)


def _folder(path, rows):
    path.mkdir()
    pd.DataFrame(rows, columns=["cell_id", "val_top1", "test_top1"]).to_csv(path / "results.csv", index=False)
    return path


def test_the_script_writes_to_runs_and_compares_with_the_committed_folder():
    script = (REPO / "scripts" / "run-smoke.sh").read_text()
    run = next(line for line in script.splitlines() if "normbench run suites/smoke.yaml" in line)
    assert '--out "$out"' in run and "out=runs/smoke" in script
    assert script.rstrip().endswith('scripts/compare_smoke.py "$out" results/smoke')
    assert "/runs/" in (REPO / ".gitignore").read_text().splitlines()


def test_compare_says_whether_each_committed_cell_got_the_same_numbers(tmp_path):
    kept = _folder(tmp_path / "kept", [("a", 60.0, 58.0), ("b", math.nan, math.nan)])  # b diverged
    same = _folder(tmp_path / "same", [("a", 60.004, 58.0), ("b", math.nan, math.nan), ("extra", 1.0, 1.0)])
    code, line = compare_smoke.compare(same, kept)
    assert code == 0 and line.startswith(f"{same} matches the committed {kept}: all 2 cells")
    moved = _folder(tmp_path / "moved", [("a", 60.0, 57.5), ("b", 10.0, 10.0)])
    code, line = compare_smoke.compare(moved, kept)
    assert code == 0 and "differs from the committed" in line and "in 2 of 2 cells" in line and "0.50 points" in line
    short = _folder(tmp_path / "short", [("a", 60.0, 58.0)])
    code, line = compare_smoke.compare(short, kept)
    assert code == 1 and "lacks 1 of the 2 cells" in line and "(e.g. b)" in line
    assert compare_smoke.compare(tmp_path / "none", kept)[0] == 1


def test_compare_names_the_thread_counts_when_they_explain_a_difference(tmp_path):
    # measured: with two sweep workers signed in, a smoke run took 1 thread of the 2 cores, and 5 of 24 cells moved
    kept = _folder(tmp_path / "kept", [("a", 60.0, 58.0), ("b", 70.0, 69.0)])
    moved = _folder(tmp_path / "moved", [("a", 60.0, 57.5), ("b", 70.0, 69.0)])
    for folder, threads in ((kept, ["2", "2"]), (moved, ["1", "2"])):
        csv = pd.read_csv(folder / "results.csv").assign(torch_threads=threads)
        csv.to_csv(folder / "results.csv", index=False)
    code, line = compare_smoke.compare(moved, kept)
    assert code == 0 and "in 1 of 2 cells" in line
    assert "trained on 1 torch thread(s) where the committed cells used 2: `OMP_NUM_THREADS=2`" in line
    same_threads = _folder(tmp_path / "same", [("a", 60.0, 57.5), ("b", 70.0, 69.0)])
    pd.read_csv(same_threads / "results.csv").assign(torch_threads=["2", "2"]).to_csv(
        same_threads / "results.csv", index=False)
    assert "another CPU or torch build" in compare_smoke.compare(same_threads, kept)[1]  # threads agree: not them


def test_the_script_trains_on_one_thread_per_core_unless_told_otherwise():
    script = (REPO / "scripts" / "run-smoke.sh").read_text()
    assert 'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"' in script
