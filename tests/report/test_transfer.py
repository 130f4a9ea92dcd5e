"""normbench.report.transfer: does a reference suite's layer ranking hold here? Rho, its bootstrap interval, the
verdict, and the leaderboard section that reports them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from normbench.contracts.selection import add_scores
from normbench.contracts.suite import load_suite
from normbench.errors import SuiteError
from normbench.report.transfer import ranking_transfer, spearman

LAYERS = ["layernorm", "layerscale", "rezero", "rmsnorm"]


def cell(layer: str, lr: float, seed: int, val: float, test: float, depth: int = 12) -> dict:
    return {"layer": layer, "depth": depth, "lr": lr, "seed": seed, "status": "ok", "best_val_top1": val,
            "val_top1": val, "test_top1": test}


def suite_cells(scores: dict[str, float], spread: float = 0.0, seeds: int = 3, depth: int = 12) -> pd.DataFrame:
    """One lr per layer; seed s scores `score + spread * (s - 1)` (mean `score` for 3 seeds)."""
    return add_scores(pd.DataFrame([cell(layer, 1e-3, s, 50.0, score + spread * (s - (seeds - 1) / 2), depth)
                                    for layer, score in scores.items() for s in range(seeds)]))


def row(result, depth=12) -> pd.Series:
    return result.summary.set_index("depth").loc[depth]


def test_identical_rankings_give_rho_1_and_hold_when_seeds_agree():
    here = suite_cells({"layernorm": 70, "layerscale": 80, "rezero": 60, "rmsnorm": 75})
    there = suite_cells({"layernorm": 90, "layerscale": 99, "rezero": 85, "rmsnorm": 95})  # other scale, same order
    r = row(ranking_transfer(here, there, resamples=200))
    assert r["rho"] == 1.0 and (r["low"], r["high"]) == (1.0, 1.0) and r["verdict"] == "holds" and r["layers"] == 4


def test_a_reversed_ranking_gives_rho_minus_1_and_reversed():
    here = suite_cells({"layernorm": 70, "layerscale": 80, "rezero": 60})
    there = suite_cells({"layernorm": 70, "layerscale": 60, "rezero": 80})
    r = row(ranking_transfer(here, there, resamples=200))
    assert r["rho"] == -1.0 and r["verdict"] == "reversed"


def test_rho_with_a_tie_matches_the_hand_computed_value():
    # ranks (ties averaged) [1, 2.5, 2.5, 4] vs [1, 3, 2, 4]: r = 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert spearman([4.0, 2.0, 2.0, 1.0], [4.0, 2.0, 3.0, 1.0]) == pytest.approx(math.sqrt(0.9))
    here = suite_cells(dict(zip(LAYERS, [4.0, 2.0, 2.0, 1.0], strict=True)))
    there = suite_cells(dict(zip(LAYERS, [4.0, 2.0, 3.0, 1.0], strict=True)))
    result = ranking_transfer(here, there, resamples=50)
    assert row(result)["rho"] == pytest.approx(math.sqrt(0.9))
    assert result.rankings.set_index("layer").loc["layerscale", "rank_here"] == 2.5


def test_the_interval_widens_when_seed_scores_are_noisy():
    means = {"layernorm": 70, "layerscale": 72, "rezero": 74, "rmsnorm": 76}
    calm = row(ranking_transfer(suite_cells(means, spread=0.1), suite_cells(means, spread=0.1), resamples=500))
    noisy = row(ranking_transfer(suite_cells(means, spread=8.0), suite_cells(means, spread=8.0), resamples=500))
    assert calm["rho"] == noisy["rho"] == 1.0  # same means: same point estimate
    assert noisy["high"] - noisy["low"] > calm["high"] - calm["low"]
    assert calm["verdict"] == "holds" and noisy["verdict"] == "not settled"


def test_selection_reads_val_not_test():
    base = suite_cells({"layernorm": 70, "layerscale": 80, "rezero": 60})
    # a second lr with worse val everywhere; its test is poisoned to be huge and reversed
    poison = {"layernorm": 1000.0, "layerscale": 500.0, "rezero": 2000.0}
    worse = add_scores(pd.DataFrame([cell(layer, 1e-2, s, 10.0, test) for layer, test in poison.items()
                                     for s in range(3)]))
    result = ranking_transfer(pd.concat([base, worse], ignore_index=True), base, resamples=50)
    assert set(result.rankings["lr_here"]) == {1e-3} and row(result)["rho"] == 1.0
    assert result.rankings["score_here"].max() == 80.0


def test_fewer_than_three_common_layers_give_a_note_and_no_rho():
    here = suite_cells({"layernorm": 70, "layerscale": 80, "rezero": 60})
    there = suite_cells({"layernorm": 70, "layerscale": 80, "rmsnorm": 60})  # rezero/rmsnorm not shared
    result = ranking_transfer(here, there, resamples=50)
    assert math.isnan(row(result)["rho"]) and row(result)["layers"] == 2
    assert any("depth 12" in n and "at least 3" in n for n in result.notes)
    assert "all" not in set(result.summary["depth"])  # nothing to pool


def test_one_seed_gives_no_interval_rather_than_a_zero_width_one():
    here = suite_cells({"layernorm": 70, "layerscale": 80, "rezero": 60}, seeds=1)
    result = ranking_transfer(here, here, resamples=50)
    assert row(result)["rho"] == 1.0 and row(result)["verdict"] == "not settled"
    assert any("one seed" in n for n in result.notes)


def test_pooled_rho_is_the_mean_of_the_depth_rhos():
    scores = {"layernorm": 70, "layerscale": 80, "rezero": 60}
    here = pd.concat([suite_cells(scores, 0.5, depth=12), suite_cells(scores, 0.5, depth=36)], ignore_index=True)
    there = pd.concat([suite_cells(scores, 0.5, depth=12),
                       suite_cells({"layernorm": 70, "layerscale": 60, "rezero": 80}, 0.5, depth=36)],
                      ignore_index=True)
    result = ranking_transfer(here, there, resamples=200)
    assert row(result, 12)["rho"] == 1.0 and row(result, 36)["rho"] == -1.0
    pooled = row(result, "all")
    assert pooled["rho"] == 0.0 and pooled["layers"] == 6 and pooled["verdict"] == "not settled"


@pytest.mark.parametrize("reference", [3, [], ["results/a", 3], ""])
def test_reference_must_be_a_folder_or_a_list_of_folders(write_suite, reference):
    with pytest.raises(SuiteError, match="reference: expected the path of another suite's output folder"):
        load_suite(write_suite(reference=reference))


def test_the_first_reference_is_the_ranking_transfers(write_suite):
    assert load_suite(write_suite(reference="results/a")).reference == "results/a"
    listed = load_suite(write_suite(reference=["results/a", "results/b"]))
    assert listed.reference == "results/a" and listed.references == ["results/a", "results/b"]
    assert load_suite(write_suite()).reference is None and load_suite(write_suite()).references == []


def reference_folder(path: Path, scores: dict[str, float], depth: int = 1) -> Path:
    path.mkdir()
    suite_cells(scores, spread=0.5, depth=depth).to_csv(path / "results.csv", index=False)
    return path


def test_leaderboard_section_from_the_suite_key_and_the_cli_override(write_suite, tmp_path, one_torch_thread):
    from normbench.cli import main
    from normbench.report.leaderboard import write_leaderboard

    layers = ["layernorm", "layerscale", "rezero"]
    same = reference_folder(tmp_path / "digits-ref", {"layernorm": 70, "layerscale": 80, "rezero": 60})
    other = reference_folder(tmp_path / "other-ref", {"layernorm": 50, "layerscale": 55, "rezero": 40})
    path = write_suite(matrix={"depth": [1], "layer": layers, "lr": [1e-3], "seed": [0, 1]}, reference=str(same))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    board = (out / "leaderboard.md").read_text()
    assert "## Ranking transfer from digits-ref" in board and "Spearman" in board and "bootstrap" in board
    assert "| depth" in board and "rank in digits-ref" in board
    summary = pd.read_csv(out / "transfer.csv")
    assert summary["depth"].astype(str).tolist() == ["1", "all"] and (summary["layers"] == [3, 3]).all()
    assert (summary["reference"] == str(same)).all()

    assert main(["leaderboard", str(out), "--reference", str(other)]) == 0  # the flag beats the suite key
    board = (out / "leaderboard.md").read_text()
    assert "## Ranking transfer from other-ref" in board and "digits-ref" not in board
    assert (pd.read_csv(out / "transfer.csv")["reference"] == str(other)).all()

    load = load_suite(out / "suite.yaml")
    write_leaderboard(out, suite=load, reference=tmp_path / "missing")  # a missing folder is a note, not a crash
    board = (out / "leaderboard.md").read_text()
    assert "## Ranking transfer from missing" in board and "not found" in board

    elsewhere = reference_folder(tmp_path / "deeper-ref", {"layernorm": 70, "layerscale": 80, "rezero": 60}, depth=36)
    write_leaderboard(out, suite=load, reference=elsewhere)  # no depth in both: a note, not a crash (it was a KeyError)
    assert "NOTE: no depth is in both suites" in (out / "leaderboard.md").read_text()
    assert pd.read_csv(out / "transfer_rankings.csv").empty

    legacy = tmp_path / "legacy"
    legacy.mkdir()
    suite_cells({"layernorm": 70, "layerscale": 80, "rezero": 60}, depth=1).drop(
        columns=["val_top1", "test_top1"]).to_csv(legacy / "results.csv", index=False)
    write_leaderboard(out, suite=load, reference=legacy)
    assert "lacks val_top1, test_top1" in (out / "leaderboard.md").read_text()
