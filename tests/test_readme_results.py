"""docs/results.md's tables and README.md's headline table hold the published folders' own numbers:
scripts/readme_results.py cuts them from each leaderboard.md and the regimes comparison, and both files must be
what it writes (rounded once, bold only on the true maximum)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("readme_results", REPO / "scripts" / "readme_results.py")
readme_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_results)

FINAL = """| rank     | layer   | test top-1 (%)   | 95% CI         | n   | non-failing (%)   | lr (val-selected)   | edge   | converged   | lr sensitivity (points)   | failed   |
|----------|---------|------------------|----------------|-----|-------------------|---------------------|--------|-------------|---------------------------|----------|
| 1 ★      | a       | 95.69            | [90.40, 99.00] | 4   | 95.69 (4)         | 0.00316             |        | yes         | 0.50                      | 0/8 (0%) |
| 2        | b       | 95.69            | [89.29, 99.88] | 4   | 95.69 (4)         | 0.001               | edge   | no          | 1.25                      | 1/8 (12%) |"""  # noqa: E501


def checkout(tmp_path, readme: str = ("<!-- headline:begin -->\n<!-- headline:end -->\n"
                                      "<!-- modern-headline:begin -->\n<!-- modern-headline:end -->\n"),
             results: str = ("<!-- results:begin -->\n<!-- results:end -->\n"
                             "<!-- modern:begin -->\n<!-- modern:end -->\n"
                             "<!-- frontier:begin -->\n<!-- frontier:end -->\n"
                             "<!-- muon:begin -->\n<!-- muon:end -->\n")):
    """A checkout with the published folders, a README and docs/results.md (both with markers unless told)."""
    shutil.copytree(REPO / "results", tmp_path / "results", ignore=shutil.ignore_patterns("*.journal", "*.db"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs" / "results.md").write_text(results)
    return tmp_path


def test_the_readme_and_docs_tables_are_the_published_files():
    assert readme_results.main(["--check"]) == 0, (
        "run `python scripts/readme_results.py` and commit README.md and docs/results.md")


def test_the_readme_gets_one_table_and_docs_every_table(tmp_path):
    root = checkout(tmp_path)
    assert readme_results.main(["--check", "--root", str(root)]) == 1  # the empty blocks are stale
    assert readme_results.main(["--root", str(root)]) == 0
    assert readme_results.main(["--check", "--root", str(root)]) == 0
    readme, docs = (root / "README.md").read_text(), (root / "docs" / "results.md").read_text()
    deepest = max(readme_results.depths(readme_results.read(
        root / "results" / readme_results.REGIMES[0] / "leaderboard.md")), key=int)
    headline = readme.split(readme_results.HEADLINE_END)[0]
    assert headline.count("| rank |") == 1 and f"Depth {deepest}, width 64 (4 heads, patch 2), AdamW, final" in headline
    # its convergence count is the table's own (the regime line's counts every depth), beside the folder's
    assert "0 of 6 rows here converged (3 of 24 across depths)" in headline
    assert "report [" in readme and "(docs/results.md)" in readme
    assert docs.count("Regime: width 64 (4 heads, patch 2), AdamW; ") == len(readme_results.REGIMES)
    # modern and frontier: each its whole regime line
    assert docs.count("Regime: width 64 (4 heads, patch 2); AdamW, 40 epochs") == 2
    assert docs.count("| rank |") > 1 and "lr sensitivity" in docs and "Both regimes side by side" in docs
    (root / "docs" / "results.md").write_text(docs.replace("| rank |", "| rank! |", 1))  # a hand edit
    assert readme_results.main(["--check", "--root", str(root)]) == 1


def test_a_tables_convergence_count_reads_its_own_converged_column():
    assert readme_results.converged_here(FINAL.splitlines(), None) == "1 of 2 rows here"


def test_only_the_top_row_is_bold_even_when_rounding_ties_it_with_the_next():
    table = readme_results.accuracy_table(FINAL.splitlines())
    assert table[0].split(" | ")[:3] == ["| rank", "layer", "test top-1 (%)"]
    assert "**95.69**" in table[2] and "**" not in table[3]  # the file sorts by the full-precision score
    assert "non-failing" not in table[0] and "| 1/8 (12%) |" in table[3]


def test_a_leaderboard_without_a_kept_column_names_the_column_and_the_command(tmp_path):
    source = tmp_path / "results" / "some-folder" / "leaderboard.md"
    lines = FINAL.replace("| converged   ", "| done        ").splitlines()
    with pytest.raises(SystemExit, match=r"`converged`.*normbench leaderboard results/some-folder"):
        readme_results.accuracy_table(lines, source)


def test_a_regime_line_without_its_optimizer_says_how_to_regenerate(tmp_path):
    source = tmp_path / "results" / "old" / "leaderboard.md"
    parts = {"": ["- train: epochs=40, optimizer=adamw", "- regime: 40 epochs = 640 optimizer steps; 1 of 2"]}
    with pytest.raises(SystemExit, match="does not begin with the optimizer .AdamW.*normbench leaderboard results/old"):
        readme_results.regime_of(parts, source)


def test_a_leaderboard_without_the_expected_section_says_how_to_regenerate(tmp_path):
    board = tmp_path / "results" / readme_results.REGIMES[0]
    board.mkdir(parents=True)
    (board / "leaderboard.md").write_text("# normbench leaderboard: x\n\n- regime: 1 epoch; early\n")
    with pytest.raises(SystemExit, match="normbench leaderboard"):
        readme_results.sensitivity_block(tmp_path)
    with pytest.raises(SystemExit, match="normbench leaderboard"):
        readme_results.headline(tmp_path)


@pytest.mark.parametrize("which", ["README.md", "docs/results.md"])
def test_a_file_without_its_markers_is_refused(tmp_path, which):
    root = checkout(tmp_path)
    (root / which).write_text("# no markers\n")
    with pytest.raises(SystemExit, match=f"{which} lacks the .* markers"):
        readme_results.main(["--root", str(root)])


def test_a_root_without_a_readme_names_the_flag(tmp_path, capsys):
    assert readme_results.main(["--root", str(tmp_path / "absent")]) == 2
    assert "--root" in capsys.readouterr().err


MODERN_BOARD = """# normbench leaderboard: depth-sweep-digits-modern

- suite: `x/suite.yaml` — digits, depth 36, the modern recipes
- model: embed_dim=192, num_heads=12, patch_size=2, mlp_ratio=4.0
- train: epochs=40, batch_size=64, optimizer=adamw, weight_decay=0.05
- seeds: selection [0, 1]; report [100, 101, 102, 103]
- regime: AdamW, 40 epochs = 640 optimizer steps per cell; 2 of 2 rows converged

## depth 36: final accuracy (40 epochs)

| rank | layer | test top-1 (%) | 95% CI | n | non-failing (%) | val top-1 (%) | lr (val-selected) | edge | converged | lr window | lr sensitivity (points) | failed |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| 1 ★ | ngpt | 97.50 | [96.00, 99.00] | 4 | 97.50 (4) | 97.00 | 0.001 | | yes | 0.001–0.00316 (x3.16) | 1.25 | 0/8 (0%) |
| 2 | layernorm | 90.00 | [85.00, 95.00] | 4 | 90.00 (4) | 89.00 | 0.001 | | yes | 0.001 (x1) | 6.50 | 1/8 (12%) |

## claims (paired t test, Holm-adjusted)

| claim | difference (points) | verdict |
|---|---|---|
| ngpt beats layernorm at depth 36 | +7.50 | supported |

## cost per train step at this suite's shape (cpu, torch 2.14.1, batch 64: [cost-cpu-2.14.1.md](cost-cpu-2.14.1.md))

| layer | depth | step (ms) | step vs layernorm | memory (MiB) | memory vs layernorm | params (M) |
|---|---|---|---|---|---|---|
| layernorm | 36 | 216.6 | 1.00x | 182.2 | 1.00x | 1.802 |
| ngpt | 36 | 304.0 | 1.40x | 299.8 | 1.65x | 1.787 |
"""  # noqa: E501


def test_the_modern_block_puts_each_layers_cost_beside_its_accuracy_and_keeps_the_claims(tmp_path):
    folder = tmp_path / "results" / readme_results.MODERN
    folder.mkdir(parents=True)
    (folder / "leaderboard.md").write_text(MODERN_BOARD)
    block = readme_results.modern_block(tmp_path).splitlines()
    header = next(line for line in block if line.startswith("| rank |"))
    assert header.endswith("| failed | converged | step vs layernorm (cpu) | memory vs layernorm (cpu) |")
    assert "| lr window |" in header and "| lr sensitivity (points) |" in header
    ngpt, layernorm = (next(line for line in block if line.startswith(f"| {r} |")) for r in ("1 ★", "2"))
    assert "| **97.50** |" in ngpt and ngpt.endswith("| yes | 1.40x | 1.65x |")
    assert "**" not in layernorm and layernorm.endswith("| 1.00x | 1.00x |")
    assert "| ngpt beats layernorm at depth 36 | +7.50 | supported |" in block
    assert block[0] == readme_results.MODERN_BEGIN and block[-1] == readme_results.MODERN_END


def test_the_readme_gets_the_modern_table_with_each_layers_step_cost_and_a_link_to_the_rest(tmp_path):
    folder = tmp_path / "results" / readme_results.MODERN
    folder.mkdir(parents=True)
    (folder / "leaderboard.md").write_text(MODERN_BOARD)
    block = readme_results.modern_headline(tmp_path).splitlines()
    assert block[0] == readme_results.MODERN_HEADLINE_BEGIN and block[-1] == readme_results.MODERN_HEADLINE_END
    header = next(line for line in block if line.startswith("| rank |"))
    assert header == ("| rank | layer | test top-1 (%) | 95% CI | lr (val-selected) | lr window | failed "
                      "| step vs layernorm (cpu) |")  # memory and the claims stay in docs/results.md
    assert "| 1 ★ | ngpt | **97.50** | [96.00, 99.00] | 0.001 | 0.001–0.00316 (x3.16) | 0/8 (0%) | 1.40x |" in block
    lead = block[2]
    assert "Depth 36, width 192 (12 heads, patch 2), AdamW, final" in lead  # the width and optimizer its header gives
    assert "after 40 epochs = 640 optimizer steps per cell; 2 of 2 rows converged;" in lead
    assert f"(results/{readme_results.MODERN}/leaderboard.md)" in lead and "docs/results.md#todays-recipes" in lead


def test_the_modern_blocks_point_to_the_sweep_while_it_trains(tmp_path):
    for block in (readme_results.modern_block(tmp_path), readme_results.modern_headline(tmp_path)):
        assert f"results/in-progress/{readme_results.MODERN}" in block and "| rank |" not in block
    for name, block in ((readme_results.FRONTIER, readme_results.frontier_block(tmp_path)),
                        (readme_results.MUON, readme_results.muon_block(tmp_path))):
        assert f"results/in-progress/{name}" in block and "| rank |" not in block


def test_the_frontier_block_is_cut_from_its_own_folder(tmp_path):
    folder = tmp_path / "results" / readme_results.FRONTIER
    folder.mkdir(parents=True)
    (folder / "leaderboard.md").write_text(MODERN_BOARD.replace("digits, depth 36, the modern recipes", "frontier"))
    block = readme_results.frontier_block(tmp_path).splitlines()
    assert block[0] == readme_results.FRONTIER_BEGIN and block[-1] == readme_results.FRONTIER_END
    assert block[2].startswith(f"`results/{readme_results.FRONTIER}/` (frontier). Regime: width 192")
    assert "| ngpt beats layernorm at depth 36 | +7.50 | supported |" in block
