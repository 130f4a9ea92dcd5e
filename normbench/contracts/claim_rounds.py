"""The suite's `sequential:` section: how claims add report seeds in rounds until they decide (docs/protocol.md).

    sequential: {max_seeds: 16, margin: 2.0, spending: pocock}

- `max_seeds` (default 16): the most report seeds a claim's rows get; a round adds as many as `report_seeds` lists
  (4 -> rounds at 4, 8, 12, 16). Equal to len(report_seeds): no rounds, and each claim is one fixed-size test at
  the full level.
- `margin` (points, optional): the no-effect margin of a claim whose source claims no size (`claimed`); without
  either, a claim can be supported or contradicted, never "no effect found".
- `spending`: the alpha-spending function of the looks (report/sequential.py): `pocock` (default) or
  `obrien_fleming`.

The seeds of round r > 1 continue from the largest report seed upward, skipping the selection seeds (report seeds are
fresh: selection never saw them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from normbench.errors import SuiteError, did_you_mean

SPENDING = ("pocock", "obrien_fleming")  # as report/sequential.py computes them
DEFAULT_MAX_SEEDS = 16
KEYS = ("max_seeds", "margin", "spending")


@dataclass(frozen=True)
class ClaimRounds:
    max_seeds: int = DEFAULT_MAX_SEEDS
    margin: float | None = None
    spending: str = "pocock"


def parse_claim_rounds(raw: Any, report_seeds: Sequence[int], where: str) -> ClaimRounds:
    """The `sequential:` section (None: the defaults), checked against the suite's report seeds."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: sequential: expected a mapping like {{max_seeds: 16, margin: 2.0, spending: "
                         f"pocock}}, got {raw!r}")
    for key in raw:
        if key not in KEYS:
            raise SuiteError(f"{where}: sequential.{key}: unknown key{did_you_mean(str(key), KEYS)} "
                             f"(keys: {', '.join(KEYS)})")
    max_seeds = raw.get("max_seeds", DEFAULT_MAX_SEEDS)
    if isinstance(max_seeds, bool) or not isinstance(max_seeds, int) or max_seeds < 2:
        raise SuiteError(f"{where}: sequential.max_seeds: expected an integer of at least 2 (the most report seeds a "
                         f"claim's rows get), got {max_seeds!r}")
    if report_seeds and max_seeds < len(report_seeds):
        raise SuiteError(f"{where}: sequential.max_seeds: {max_seeds} is below the {len(report_seeds)} report seeds "
                         f"every row trains; set it to at least {len(report_seeds)} ({len(report_seeds)}: no rounds)")
    margin = raw.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float)) or margin <= 0):
        raise SuiteError(f"{where}: sequential.margin: expected a positive number of points (the no-effect margin of "
                         f"a claim with no `claimed` size), got {margin!r}")
    spending = raw.get("spending", "pocock")
    if spending not in SPENDING:
        raise SuiteError(f"{where}: sequential.spending: {spending!r} is not a spending function"
                         f"{did_you_mean(str(spending), SPENDING)} (choose {' or '.join(SPENDING)})")
    return ClaimRounds(max_seeds, float(margin) if margin is not None else None, spending)


def round_seeds(report_seeds: Sequence[int], selection_seeds: Sequence[int], rounds: ClaimRounds) -> list[int]:
    """Every seed the claim rounds may train, in order: the report seeds, then the next ones up from the largest,
    skipping selection seeds, up to `max_seeds` in all."""
    seeds = list(report_seeds)
    if not seeds:
        return []
    taken, candidate = set(selection_seeds) | set(seeds), max(seeds)
    while len(seeds) < rounds.max_seeds:
        candidate += 1
        if candidate not in taken:
            seeds.append(candidate)
    return seeds
