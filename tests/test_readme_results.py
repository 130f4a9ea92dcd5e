"""README "Results so far" holds the published folders' own numbers: scripts/readme_results.py cuts its tables from
each leaderboard.md and the regimes comparison, and the README must be what it writes (rounded once, bold only on
the true maximum)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("readme_results", REPO / "scripts" / "readme_results.py")
readme_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_results)

FINAL = """| rank     | layer   | test top-1 (%)   | 95% CI         | n   | non-failing (%)   | lr (val-selected)   | edge   | converged   | lr sensitivity (points)   | failed   |
|----------|---------|------------------|----------------|-----|-------------------|---------------------|--------|-------------|---------------------------|----------|
| 1 ★      | a       | 95.69            | [90.40, 99.00] | 4   | 95.69 (4)         | 0.00316             |        | yes         | 0.50                      | 0/8 (0%) |
| 2        | b       | 95.69            | [89.29, 99.88] | 4   | 95.69 (4)         | 0.001               | edge   | no          | 1.25                      | 1/8 (12%) |"""  # noqa: E501


def test_the_readme_tables_are_the_published_files():
    assert readme_results.main(["--check"]) == 0, "run `python scripts/readme_results.py` and commit README.md"


def test_only_the_top_row_is_bold_even_when_rounding_ties_it_with_the_next():
    table = readme_results.accuracy_table(FINAL.splitlines())
    assert table[0].split(" | ")[:3] == ["| rank", "layer", "test top-1 (%)"]
    assert "**95.69**" in table[2] and "**" not in table[3]  # the file sorts by the full-precision score
    assert "non-failing" not in table[0] and "| 1/8 (12%) |" in table[3]


def test_a_leaderboard_without_the_expected_section_says_how_to_regenerate(tmp_path):
    board = tmp_path / "results" / readme_results.REGIMES[0]
    board.mkdir(parents=True)
    (board / "leaderboard.md").write_text("# normbench leaderboard: x\n\n- regime: 1 epoch; early\n")
    with pytest.raises(SystemExit, match="normbench leaderboard"):
        readme_results.sensitivity_block(tmp_path)


def test_a_readme_without_markers_is_refused(tmp_path):
    (tmp_path / "README.md").write_text("# no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        readme_results.main(["--root", str(tmp_path)])


def test_a_root_without_a_readme_names_the_flag(tmp_path, capsys):
    assert readme_results.main(["--root", str(tmp_path / "absent")]) == 2
    assert "--root" in capsys.readouterr().err
