"""`normbench compare`: one grid's folders at two budgets side by side, ordered by budget, bold only on each
column's true maximum, every conclusion read in both regimes; folders that cannot be compared are refused."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from normbench.errors import NormbenchError
from normbench.report.regimes import change_word, difference_text, score_text
from normbench.report.tables import BASELINE_VERDICTS

MATRIX = {"depth": [1], "layer": ["layernorm", "layerscale", "rezero"], "lr": [1.0e-3], "seed": [0, 1]}
CLAIM = {"layer": "layerscale", "beats": "layernorm", "depth": 1}


def run(write_suite, tmp_path: Path, epochs: int) -> Path:
    from normbench.cli import main

    path = write_suite(name=f"tiny{epochs}", matrix=MATRIX, report_seeds=[7, 8], claims=[CLAIM],
                       train={"epochs": epochs, "batch_size": 256, "warmup_epochs": 0})
    out = tmp_path / f"e{epochs}"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    return out


def test_compare_lines_up_two_budgets_and_reads_every_conclusion_in_both(write_suite, tmp_path: Path,
                                                                        one_torch_thread, capsys):
    from normbench.cli import main

    short, long = run(write_suite, tmp_path, 1), run(write_suite, tmp_path, 2)
    target = tmp_path / "regimes.md"
    assert main(["compare", str(long), str(short), "--out", str(target)]) == 0  # any order: sorted by budget
    text = target.read_text()
    assert text.startswith("# normbench regimes: 1 epochs vs 2 epochs")
    for section in ("## depth 1: final accuracy in each regime", "## does the ranking hold across budgets?",
                    "## against layernorm in each regime", "## claims in each regime"):
        assert section in text, section
    table = text.split("## depth 1: final accuracy in each regime (rank 1 = best)\n\n")[1].split("\n\n")[0]
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    assert sorted(r[0].strip() for r in rows) == ["layernorm", "layerscale", "rezero"]
    # bold marks exactly the true maximum of each regime's score column, taken from results.csv at full precision
    for column, folder in ((1, short), (4, long)):
        cells = pd.read_csv(folder / "results.csv")
        scores = cells[cells["role"] == "report"].groupby("layer")["test_top1"].mean()
        bold = [r[0].strip() for r in rows if "**" in r[column]]
        assert bold == sorted(scores[scores == scores.max()].index), (column, bold)
    claims = text.split("## claims in each regime")[1]
    assert len(re.findall(r"layerscale beats layernorm at depth 1", claims)) == 2  # once per regime
    assert "4 report" not in text  # report seeds 7 and 8: two per row
    capsys.readouterr()
    assert main(["compare", str(short), str(long)]) == 0  # without --out: printed
    assert capsys.readouterr().out.strip() == text.strip()


def test_compare_refuses_folders_it_cannot_line_up(write_suite, tmp_path: Path, one_torch_thread, capsys):
    from normbench.cli import main

    short = run(write_suite, tmp_path, 1)
    assert main(["compare", str(short), str(short)]) == 2  # one folder twice: nothing to compare
    assert "the same folder twice" in capsys.readouterr().err
    assert main(["compare", str(short)]) == 2
    assert "at least two output folders" in capsys.readouterr().err
    assert main(["compare", str(short), str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_change_word_names_how_a_reading_moves_with_budget():
    better, worse, tied = BASELINE_VERDICTS.above, BASELINE_VERDICTS.below, BASELINE_VERDICTS.neither
    assert change_word(better, better) == "holds"
    assert change_word(better, worse) == "flips"
    assert change_word(better, tied) == "fades with budget"
    assert change_word(tied, worse) == "appears with budget"


def test_score_text_rounds_once_and_bolds_only_when_told():
    assert score_text(45.648, 40.04, 51.25, best=False) == "45.6 [40.0, 51.2]"  # not 45.7 via 45.65
    assert score_text(83.148, float("nan"), float("nan"), best=True) == "**83.1**"


def test_a_difference_and_its_interval_share_one_rounding():
    assert difference_text(11.944444, 10.06, 13.83) == "+11.9 [10.1, 13.8]"
    assert difference_text(-2.25, math.nan, math.nan) == "-2.2 —"  # one pair: no interval
    assert difference_text(math.nan, math.nan, math.nan) == "—"


def test_read_folder_names_the_fix_for_a_folder_without_a_suite(tmp_path: Path):
    from normbench.report.folder import read_folder

    with pytest.raises(NormbenchError, match="no suite.yaml here"):
        read_folder(tmp_path)


def test_a_claim_in_each_regime_states_what_its_test_could_detect_as_the_leaderboard_does():
    from normbench.report.regimes import claim_line
    from normbench.report.tables import detectable_text

    claim = pd.Series({"layer": "derf", "beats": "dyt", "depth": 36, "by": 0.0, "mean": 4.7, "low": -10.3,
                       "high": 19.6, "p_holm": 1.0, "n": 4, "detectable": 35.014, "alpha": 0.05,
                       "detectable_level": 0.01, "reference": 0.3, "verdict": "underpowered"})  # a sequential look
    line = claim_line(claim, "width 64", axis="width")
    assert line["width"] == "width 64" and line["verdict"] == "underpowered"
    assert line["detectable at 80% power (points)"] == "35.01 at α 0.01 (source: 0.30)"
    assert line["detectable at 80% power (points)"] == detectable_text(35.014, 0.01, 4, 0.3)


def test_a_claim_holds_across_regimes_only_where_each_decided_it_alike():
    """The width comparison said "holds" for claims only the width-64 folder had, and "changes" where the width-192
    folder, unfinished, could not decide."""
    from normbench.report.regimes import claim_across

    assert claim_across(["supported", "supported"], ["10 epochs", "40 epochs"], unfinished=False) == "holds"
    assert claim_across(["supported", "contradicted"], ["a", "b"], unfinished=False) == "changes"
    assert claim_across(["contradicted", "underpowered"], ["a", "b"], unfinished=False) == "decided in 1 of 2"
    assert claim_across(["supported", "supported", "underpowered"], ["a", "b", "c"], unfinished=False) == \
        "decided in 2 of 3"
    # two rows of one regime (an axis the claim does not name): still read in that regime only
    assert claim_across(["supported", "supported"], ["width 64", "width 64"], unfinished=False) == "width 64 only"
    assert claim_across(["underpowered", "underpowered"], ["a", "b"], unfinished=False) == \
        "undecided (open or underpowered in each)"
    assert claim_across(["open", "supported"], ["a", "b"], unfinished=False) == "decided in 1 of 2"  # open: undecided
    assert claim_across(["supported", "supported"], ["a", "b"], unfinished=True) == "cannot tell (unfinished)"
    assert claim_across(["underpowered"], ["width 64"], unfinished=False) == "width 64 only"


def test_an_unfinished_folders_claim_names_the_seeds_it_paired():
    """Mid-sweep, a claim whose two rows both have report seeds pairs those; one whose rival has none yet pairs
    the selection seeds (stats.paired_difference's fallback); a steadiness claim always pairs selection seeds."""
    from normbench.contracts.selection import add_scores
    from normbench.report.claims import check_claims
    from normbench.report.regimes import paired_seeds
    from normbench.report.stats import select_lr
    from tests.report.test_stats import cell

    rows = [{**cell(name, lr, seed, val + seed - gap, val + seed - gap), "role": "select"}
            for name, val in (("a", 80.0), ("b", 70.0), ("c", 60.0)) for seed in (0, 1)
            for lr, gap in ((1e-3, 0.0), (3e-3, 5.0))]  # two lrs: a steadiness claim compares a row's lrs
    rows += [{**cell(name, 1e-3, seed, 90.0 + seed, 90.0 + seed), "role": "report"}
             for name in ("a", "b") for seed in (100, 101, 102)]
    cells = add_scores(pd.DataFrame(rows))
    selected = select_lr(cells, ["layer", "depth"])
    claims = check_claims(cells, selected, ["layer", "depth"],
                          [{"layer": "a", "beats": "b", "depth": 12}, {"layer": "a", "beats": "c", "depth": 12},
                           {"layer": "a", "steadier_than": "b", "depth": 12}])
    said = [f"{c['n']} {paired_seeds(c, selected)}" for _, c in claims.iterrows()]
    assert said == ["3 report seeds", "2 selection seeds", "2 selection seeds"]
