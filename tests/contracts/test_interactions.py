"""The suite's `interactions:` (contracts/interactions.py): what parses, and each mistake refused with one line that
names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.contracts.interactions import Interaction
from normbench.contracts.suite import parse_suite
from normbench.errors import SuiteError


def suite(interactions):
    return parse_suite({"name": "t", "dataset": {"name": "digits"},
                        "matrix": {"depth": [36], "layer": ["derf", "rmsnorm", "dyt"], "seed": [0]},
                        "interactions": interactions}, Path("t.yaml"))


def test_interactions_parse_with_an_optional_margin():
    parsed = suite([{"layer": "derf", "gap_to": "rmsnorm", "depth": 36},
                    {"layer": "dyt", "gap_to": "rmsnorm", "depth": 36, "margin": 2}]).interactions
    assert parsed == [Interaction("derf", "rmsnorm", 36), Interaction("dyt", "rmsnorm", 36, 2.0)]
    assert suite(None).interactions == []
    assert parsed[0].text("muon", "adamw") == \
        "derf's gap to rmsnorm (rmsnorm minus derf) is larger under muon than under adamw at depth 36"


@pytest.mark.parametrize(("entry", "message"), [
    ({"layer": "derf", "gap_to": "rmsnrom", "depth": 36}, "interactions[0].gap_to: 'rmsnrom' is not a layer of this "
                                                          "suite (did you mean `rmsnorm`?)"),
    ({"layer": "derf", "gap_to": "derf", "depth": 36}, "layer and gap_to are both 'derf'"),
    ({"layer": "derf", "gap_to": "rmsnorm", "depth": 12}, "interactions[0].depth: 12 is not a depth of this suite"),
    ({"layer": "derf", "gap_to": "rmsnorm", "depth": 36, "margin": 0}, "interactions[0].margin: expected a positive"),
    ({"layer": "derf", "gap_to": "rmsnorm", "depth": 36, "margin": float("inf")}, "a positive, finite number"),
    ({"layer": "derf", "gap_to": "rmsnorm", "depth": 36, "by": 1}, "interactions[0].by: unknown key"),
    ({"layer": "derf", "beats": "rmsnorm", "depth": 36}, "expected {layer: A, gap_to: B, depth: D}"),
])
def test_a_malformed_interaction_is_refused_with_its_fix(entry, message):
    with pytest.raises(SuiteError) as error:
        suite([entry])
    assert message in str(error.value)
    with pytest.raises(SuiteError, match="interactions: expected a list"):
        suite({"layer": "derf"})


def test_an_interaction_listed_twice_is_refused():
    twice = {"layer": "derf", "gap_to": "rmsnorm", "depth": 36}
    with pytest.raises(SuiteError, match=r"interactions\[1\]: the same interaction as an earlier entry"):
        suite([twice, {**twice, "margin": 1.0}])
