"""normbench.report.claims: each claim's verdict from hand-built frames, fixed-size (selection seeds) and sequential
(report seeds in rounds, docs/protocol.md "Claims that can end")."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from normbench.contracts.claim_rounds import ClaimRounds
from normbench.contracts.selection import add_scores
from normbench.report.claims import check_claims, claim_verdict
from normbench.report.sequential import t_levels
from normbench.report.stats import detectable_effect, select_lr, verdict
from normbench.report.tables import claim_text, claims_table
from tests.report.test_stats import cell, paired_cells, sensitivity_cells

KEYS = ["layer", "depth"]


@pytest.mark.parametrize(("diffs", "by", "expected"), [
    ([5.0, 6.0, 7.0], 3.4, "supported"),       # 6 ± 2.4841: [3.516, 8.484] lies above 3.4
    ([5.0, 6.0, 7.0], 4.0, "underpowered"),     # ... but not above 4, and a gain of 6 is no "no effect" (within 0 ± 4)
    ([-5.0, -6.0, -7.0], 0.0, "contradicted"),
    ([2.0, 5.0, 2.0], 0.0, "underpowered"),    # no source's effect, no margin: nothing it could have ruled out
    ([9.0], 0.0, "underpowered"),              # one seed: no interval, no test
])
def test_claims_verdicts(diffs, by, expected):
    cells = paired_cells(diffs)
    claims = [{"layer": "learnable_scaler", "beats": "layernorm", "depth": 36, "by": by}]
    table = check_claims(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], claims)
    assert table["verdict"].tolist() == [expected] and table["n"].tolist() == [len(diffs)]
    assert verdict(1.0, 2.0) == "supported" and verdict(-2.0, -1.0) == "contradicted"




def test_a_steadier_than_claim_is_read_as_a_sensitivity_difference_beside_a_beats_claim():
    cells = sensitivity_cells({s: (90.0, 88.0) for s in range(3)}, {s: (90.0, 40.0 + s) for s in range(3)})
    claims = [{"layer": "steady", "steadier_than": "shaky", "depth": 12, "by": 0.0},
              {"layer": "steady", "beats": "shaky", "depth": 12, "by": 0.0}]
    table = check_claims(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], claims)
    # per seed, shaky's sensitivity is 25, 24.5, 24 and steady's 1; at their best lr both score 90: no accuracy gain
    assert table["verdict"].tolist() == ["supported", "underpowered"]  # equal scores: no spread, no detectable effect
    assert table["mean"].tolist() == pytest.approx([23.5, 0.0])
    texts = claims_table(table)["claim"].tolist()
    assert texts[0] == claim_text(table.iloc[0]) and texts[0].startswith("steady's lr sensitivity is below shaky's")
    assert "per selection seed" in texts[0] and texts[1] == "steady beats shaky at depth 12"




@pytest.mark.parametrize(("mean", "p_holm", "p_equiv_holm", "margin", "cap_detectable", "expected"), [
    (3.0, 0.01, 0.9, 1.0, math.nan, "supported"),
    (-3.0, 0.01, 0.9, 1.0, math.nan, "contradicted"),
    (0.2, 0.6, 0.01, 1.0, math.nan, "no effect found"),  # within ±1 by two one-sided tests
    (0.2, 0.6, 0.2, 1.0, 0.9, "open"),                   # the cap could detect the 1-point margin: another round
    (0.2, 0.6, 0.2, 1.0, 1.5, "underpowered"),           # it could not: no round is worth its compute
    (6.0, 0.3, math.nan, math.nan, 4.0, "open"),         # no margin, but the cap could confirm the 6 points seen
    (0.2, 0.6, math.nan, math.nan, math.nan, "underpowered"),  # no rounds left, nothing decided
])
def test_claim_verdict_decides_then_asks_for_rounds_only_where_the_cap_could_decide(
        mean, p_holm, p_equiv_holm, margin, cap_detectable, expected):
    claim = {"mean": mean, "by": 0.0, "p_holm": p_holm, "p_equiv_holm": p_equiv_holm, "margin": margin,
             "cap_detectable": cap_detectable}
    assert claim_verdict(claim, ClaimRounds()) == expected


def test_a_suite_of_claims_lands_in_each_of_the_four_verdicts():
    """Four claims on hand-built seeds, Holm over the four: each lands in its own verdict, with its detectable effect
    at its rank's level. Differences (points) per seed:
        clear gain    +8, +9, +10, +11, +12, +13   sd 1.87: p tiny, supported
        clear loss    -8, -9, -10, -11, -12, -13   contradicted
        tight, none   -0.5, +0.5, 0, +0.5, -0.5, 0  sd 0.45: detects 0.64 point; the source claims 3 -> no effect found
        noisy         -20, +25, -5, +30, -15, +10  sd 20.8: detects 35.5 points; the source claims 3 -> underpowered
    """
    rows, layers = [], {"gain": [8, 9, 10, 11, 12, 13], "loss": [-8, -9, -10, -11, -12, -13],
                        "tight": [-0.5, 0.5, 0, 0.5, -0.5, 0], "noisy": [-20, 25, -5, 30, -15, 10]}
    for layer, diffs in layers.items():
        rows += [cell(layer, 1e-3, s, 70.0, 50.0 + d, depth=36) for s, d in enumerate(diffs)]
    rows += [cell("base", 1e-3, s, 70.0, 50.0, depth=36) for s in range(6)]
    cells = add_scores(pd.DataFrame(rows))
    claims = [{"layer": name, "beats": "base", "depth": 36, "by": 0.0, **({"claimed": 3.0} if i > 1 else {})}
              for i, name in enumerate(layers)]
    table = check_claims(cells, select_lr(cells, ["layer", "depth"]), ["layer", "depth"], claims)
    assert table["verdict"].tolist() == ["supported", "contradicted", "no effect found", "underpowered"]
    assert table["reference"].tolist() == pytest.approx([math.nan, math.nan, 3.0, 3.0], nan_ok=True)
    # by p the noisy claim ranks third (level 0.05 / 2) and the tight one, mean 0 and p 1, last (0.05 / 1)
    assert table["alpha"].tolist()[2:] == pytest.approx([0.05, 0.025])
    for (_, row), diffs in zip(table.iterrows(), layers.values(), strict=True):
        assert row["detectable"] == pytest.approx(detectable_effect(6, float(pd.Series(diffs).std()), row["alpha"]))
    assert table["detectable"].iloc[2] < 3.0 < table["detectable"].iloc[3]
    texts = claims_table(table)["detectable at 80% power (points)"].tolist()
    assert texts[2] == f"{table['detectable'].iloc[2]:.2f} at α 0.05 (source: 3.00)"
    assert texts[0].endswith("(source: none)")


def report_cells(diffs: list[float], claimed: float | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """Two rows, `new` and `base`, each with two selection seeds at one lr and report seeds 100, 101, ... whose test
    scores differ by `diffs` (new minus base); the claim "new beats base", with its source's `claimed` effect."""
    rows = [{**cell(layer, 1e-3, seed, 70.0, 70.0, depth=36), "role": "select"}
            for layer in ("new", "base") for seed in (0, 1)]
    for i, d in enumerate(diffs):
        rows.append({**cell("new", 1e-3, 100 + i, 70.0, 70.0 + d, depth=36), "role": "report"})
        rows.append({**cell("base", 1e-3, 100 + i, 70.0, 70.0, depth=36), "role": "report"})
    claim = {"layer": "new", "beats": "base", "depth": 36, "by": 0.0, **({"claimed": claimed} if claimed else {})}
    return add_scores(pd.DataFrame(rows)), [claim]


def read(cells: pd.DataFrame, claims: list[dict], rounds: ClaimRounds | None = None, round_seeds: int = 4):
    return check_claims(cells, select_lr(cells, KEYS), KEYS, claims, rounds, round_seeds).iloc[0]


def test_a_large_effect_stops_at_the_first_round_supported():
    claim = read(*report_cells([10.0, 11.0, 9.5, 10.5]))
    assert claim["sequential"] and claim["looks"] == [4] and claim["verdict"] == "supported"
    # one look at 4 of 16 seeds: its level is Pocock's spent share, and its p the t test's divided by it
    share = math.log(1 + (math.e - 1) / 4)
    assert claim["boundary"] == pytest.approx(0.05 * share)
    assert claim["p_seq"] == pytest.approx(claim["p_by"] / share, rel=1e-6)


def test_a_tight_null_stops_at_the_first_round_with_no_effect_found():
    claim = read(*report_cells([0.1, -0.1, 0.0, 0.05], claimed=3.0))
    assert claim["verdict"] == "no effect found" and claim["margin"] == 3.0 and claim["p_equiv_holm"] < 0.05


def test_a_middling_effect_stays_open_then_a_second_round_decides_it():
    first = [3.0, 9.0, 1.0, 7.0]  # mean 5, sd 3.65: p 0.07 at one look, 16 seeds would detect ~3.6
    claim = read(*report_cells(first))
    assert claim["verdict"] == "open" and claim["cap_detectable"] < 5.0
    claim = read(*report_cells([*first, 6.0, 4.0, 8.0, 5.0]))
    assert claim["looks"] == [4, 8] and claim["verdict"] == "supported"
    assert claim["boundary"] == t_levels([4, 8], 16, 0.05)[-1]  # the second look's level, calibrated on t tests
    assert claims_table(pd.DataFrame([claim]))["n (paired seeds)"].iloc[0] == "8 (looks at 4, 8)"


def test_a_claim_its_cap_could_not_decide_stops_underpowered_and_asks_for_nothing():
    claim = read(*report_cells([20.0, -18.0, 5.0, -6.0]))  # mean 0.25, sd 16: no margin, and 16 seeds detect ~16
    assert claim["verdict"] == "underpowered" and claim["cap_detectable"] > 10


def test_a_decision_stands_when_later_seeds_weaken_it():
    strong = [10.0, 11.0, 9.5, 10.5]
    claim = read(*report_cells([*strong, -5.0, 12.0, -3.0, 0.0]))  # a second round pulls the mean to 5.6
    assert claim["looks"] == [4, 8] and claim["verdict"] == "supported"
    assert claim["p_seq"] == pytest.approx(read(*report_cells(strong))["p_seq"])  # the first look's stands


def test_at_the_cap_an_undecided_claim_is_underpowered_and_a_claim_on_one_round_is_a_fixed_test():
    diffs = [3.0, 9.0, 1.0, 7.0]
    assert read(*report_cells(diffs), ClaimRounds(max_seeds=4))["verdict"] == "underpowered"
    fixed = read(*report_cells(diffs), ClaimRounds(max_seeds=4))
    assert fixed["boundary"] == pytest.approx(0.05) and fixed["p_seq"] == pytest.approx(fixed["p_by"])
    assert not read(*report_cells(diffs), round_seeds=0)["sequential"]  # a suite without rounds: one fixed test


def test_no_effect_is_an_equivalence_around_zero_not_around_by():
    """"beats by 3.4" with no `claimed`: the margin is 3.4. Seeds that replicate the claim (about +3.2) are not "no
    effect" (an equivalence around `by` said they were); seeds around 0 are."""
    cells, [claim] = report_cells([3.0, 3.6, 3.2, 3.1, 3.3, 3.2])
    replicated = read(cells, [{**claim, "by": 3.4}], round_seeds=0)
    assert replicated["margin"] == 3.4 and replicated["p_equiv_holm"] > 0.05
    assert replicated["verdict"] != "no effect found"
    cells, [claim] = report_cells([0.1, -0.1, 0.0, 0.05, -0.05, 0.0])
    none = read(cells, [{**claim, "by": 3.4}], round_seeds=0)
    assert none["verdict"] == "contradicted"  # below 3.4, decided by the difference test first
    assert none["p_equiv_holm"] < 0.05  # and equivalent to zero within 3.4


def test_a_looks_detectable_effect_is_at_the_level_it_was_judged_at():
    """A first look of 4 of 16 seeds is judged at Pocock's boundary, below the claim's Holm level: what it could
    detect is larger than a fixed test at the full level would, and the table names that level."""
    diffs = [3.0, 9.0, 1.0, 7.0]
    claim = read(*report_cells(diffs))
    sd = float(pd.Series(diffs).std())
    assert claim["boundary"] < 0.04 and claim["alpha"] == pytest.approx(0.05)
    assert claim["detectable"] == pytest.approx(detectable_effect(4, sd, claim["boundary"]))
    assert claim["detectable"] > detectable_effect(4, sd, 0.05)
    text = claims_table(pd.DataFrame([claim]))["detectable at 80% power (points)"].iloc[0]
    assert text.startswith(f"{claim['detectable']:.2f} at α {claim['boundary']:.3g}")


def test_a_folder_tune_wrote_gets_one_look_per_claim_as_it_runs_no_claim_rounds():
    from normbench.contracts.suite import parse_suite
    from normbench.report.claims import round_seeds

    suite = parse_suite({"name": "t", "dataset": {"name": "digits"}, "report_seeds": [100, 101, 102, 103],
                         "matrix": {"layer": ["layernorm"], "lr": [1e-3]}}, Path("t.yaml"))
    assert round_seeds(suite, tuned=False) == 4 and round_seeds(suite, tuned=True) == 0
    claim = read(*report_cells([3.0, 9.0, 1.0, 7.0]), round_seeds=round_seeds(suite, tuned=True))
    assert not claim["sequential"] and claim["boundary"] == pytest.approx(claim["alpha"])
