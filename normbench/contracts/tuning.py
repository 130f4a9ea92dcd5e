"""What `normbench tune` searches, decided by the suite alone (sweep/tune.py runs it; report/tune_frame.py reads its
trials back): a study per matrix point without the seed and the tuned keys, the search's own seed, and the user attr
a search trial is labelled by."""

from __future__ import annotations

import itertools
from typing import Any

from normbench.contracts.suite import Suite

LABEL = "label"  # a search trial's user attr: trial_label's text (its cell_id attr is its budget slot, `slot-3`)


def search_keys(suite: Suite) -> list[dict[str, Any]]:
    """The matrix points that get their own study: every axis except seed and the tuned keys."""
    assert suite.tune is not None
    axes = {k: v for k, v in suite.matrix.items() if k != "seed" and k not in suite.tune.space}
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


def seeds(suite: Suite) -> list[int]:
    """The re-run seeds: the matrix's."""
    return list(suite.matrix.get("seed", [suite.train.get("seed", 0)]))


def search_seed(suite: Suite) -> int:
    """The seed the search trains on: one past the largest re-run seed, so no re-run repeats a search trial."""
    return max(seeds(suite)) + 1
