"""normbench.report.budget: does the layer ranking hold from a small budget to the largest? rho, p and swaps."""

from __future__ import annotations

import pandas as pd
import pytest

from normbench.report.budget import budget_agreement


def selected(scores: dict[int, dict[str, float]], depth: int = 12) -> pd.DataFrame:
    return pd.DataFrame([{"layer": layer, "depth": depth, "epochs": epochs, "mean": mean}
                         for epochs, by_layer in scores.items() for layer, mean in by_layer.items()])


def test_a_ranking_that_flips_with_budget_names_the_swaps():
    early = {"layerscale": 76.0, "rezero": 70.0, "layernorm": 50.0, "fixup": 40.0}
    late = {"layerscale": 94.0, "rezero": 80.0, "layernorm": 86.0, "fixup": 60.0}
    row = budget_agreement(selected({10: early, 40: late}), ["depth"]).iloc[0]
    assert (row["budget"], row["against"], row["layers"]) == (10, 40, 4)
    assert row["rho"] == pytest.approx(0.8) and row["p"] == pytest.approx(4 / 24)  # one adjacent swap of four
    assert row["swaps"] == [("rezero", "layernorm")] and row["verdict"] == "not settled"


def test_the_same_order_at_every_budget_holds_when_enough_layers_make_it_unlikely():
    scores = {name: float(i) for i, name in enumerate(["a", "b", "c", "d", "e"])}
    table = budget_agreement(selected({10: scores, 20: scores, 40: scores}), ["depth"])
    assert table["budget"].tolist() == [10, 20] and table["rho"].tolist() == pytest.approx([1.0, 1.0])
    assert table["p"].tolist() == pytest.approx([1 / 120, 1 / 120]) and (table["verdict"] == "holds").all()
    assert budget_agreement(selected({10: scores}), ["depth"]).empty  # one budget: nothing to compare
