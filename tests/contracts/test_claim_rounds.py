"""normbench.contracts.claim_rounds: the suite's `sequential:` section, checked when the suite is read, and the seeds
its rounds may train."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.contracts.suite import parse_suite
from normbench.errors import SuiteError


def test_the_round_seeds_skip_selection_seeds_and_stop_at_the_cap():
    raw = {"name": "c", "dataset": {"name": "digits"},
           "matrix": {"depth": [2], "layer": ["layernorm"], "lr": [1.0e-3], "seed": [0, 101]},
           "report_seeds": [99, 100], "sequential": {"max_seeds": 5}}
    assert parse_suite(raw, Path("c.yaml")).claim_seeds() == [99, 100, 102, 103, 104]


@pytest.mark.parametrize(("section", "message"), [
    ({"max_seeds": 2}, "below the 4 report seeds"),
    ({"max_seeds": "many"}, "expected an integer"),
    ({"margin": -1}, "positive number"),
    ({"spending": "pocok"}, "did you mean `pocock`"),
    ({"cap": 8}, "unknown key"),
])
def test_a_bad_sequential_section_is_refused_with_the_key(section, message):
    raw = {"name": "c", "dataset": {"name": "digits"}, "matrix": {"layer": ["layernorm"], "seed": [0]},
           "report_seeds": [100, 101, 102, 103], "sequential": section}
    with pytest.raises(SuiteError, match=message):
        parse_suite(raw, Path("c.yaml"))
