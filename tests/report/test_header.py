"""normbench.report.header: the regime word says when only the weak final-loss rule calls rows converged."""

from __future__ import annotations

import math

import pandas as pd

from normbench.report.header import converged_counts, regime_word


def test_rows_converged_by_the_rule_alone_are_counted_and_the_regime_says_so():
    # a: the 2x check confirmed it; b: the rule alone; c: not converged
    selected = pd.DataFrame({"layer": ["a", "b", "c"], "converged": [True, True, False],
                             "change": [0.3, math.nan, math.nan]})
    assert converged_counts(selected) == (2, 1)
    assert converged_counts(selected.drop(columns="change")) == (2, 2)  # no 2x cell anywhere
    word = regime_word(2, 3, unconfirmed=1)
    assert word.startswith("mostly converged (1 of them by the final-loss rule alone, unconfirmed): ")
    assert regime_word(3, 3) == "converged: these are final-accuracy numbers"
    assert regime_word(3, 3, unconfirmed=3).startswith("converged (3 of them by the final-loss rule alone")
    assert regime_word(1, 3, unconfirmed=1).startswith("early training")  # says nothing it does not claim


def test_the_regime_names_the_optimizer_every_cell_trained_with():
    from pathlib import Path

    from normbench.contracts.suite import parse_suite
    from normbench.report.header import optimizer_text

    def suite(train: dict, matrix: dict | None = None):
        return parse_suite({"name": "t", "dataset": {"name": "digits"}, "train": train,
                            "matrix": matrix or {"layer": ["layernorm"]}}, Path("t.yaml"))

    assert optimizer_text(suite({})) == "AdamW"  # the recipe's default
    assert optimizer_text(suite({"optimizer": "muon"})) == "Muon on the hidden matrices, AdamW on the rest"
    assert optimizer_text(suite({}, {"layer": ["layernorm"], "optimizer": ["adamw", "muon"]})) == \
        "the optimizer of each row (a matrix axis)"
    assert optimizer_text(None) is None
