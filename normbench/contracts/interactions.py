"""Interaction claims: a row's gap to a rival is larger in this folder than in another folder of the same grid that
differs in one factor (the optimizer, the width, the recipe, the budget). A difference of paired differences, so
what it tests is the pair (row x factor), not either row alone (Abouzeid 2026, arXiv 2604.01563: "Derf's gap to
RMSNorm grows under Muon"). Declared in the suite of the folder that differs, read by `normbench compare` against
the other folder (report/interactions.py; docs/protocol.md "Interactions"):

    interactions:
      - {layer: derf, gap_to: rmsnorm, depth: 36}              # (rmsnorm - derf) here > (rmsnorm - derf) there
      - {layer: derf, gap_to: derf_alpha03, depth: 36, margin: 2.0}

`margin` (points, optional) is the no-effect margin of the two one-sided tests; without it the suite's
`sequential.margin` is used, and without either no interaction reads "no effect found".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from normbench.errors import SuiteError, did_you_mean

KEYS = ("layer", "gap_to", "depth", "margin")


@dataclass(frozen=True)
class Interaction:
    layer: str             # the row whose gap is measured
    gap_to: str            # the rival: the gap is its score minus the row's
    depth: int
    margin: float | None = None  # points; None: the suite's sequential.margin

    def text(self, here: str, there: str) -> str:
        return (f"{self.layer}'s gap to {self.gap_to} ({self.gap_to} minus {self.layer}) is larger under {here} "
                f"than under {there} at depth {self.depth}")


def parse_interactions(raw: Any, layers: Sequence[str], depths: Sequence[int], where: str) -> list[Interaction]:
    """The `interactions:` list, each row a layer of this suite at one of its depths; a SuiteError naming the fix."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SuiteError(f"{where}: interactions: expected a list of {{layer: A, gap_to: B, depth: D}}, got {raw!r}")
    parsed = []
    for i, entry in enumerate(raw):
        key = f"interactions[{i}]"
        if not isinstance(entry, dict) or not {"layer", "gap_to", "depth"} <= set(entry):
            raise SuiteError(f"{where}: {key}: expected {{layer: A, gap_to: B, depth: D}} (and optionally margin: "
                             f"points): 'the gap from A to B is larger here than in the other folder', got {entry!r}")
        for k in entry:
            if k not in KEYS:
                raise SuiteError(f"{where}: {key}.{k}: unknown key{did_you_mean(str(k), KEYS)}")
        for k in ("layer", "gap_to"):
            if entry[k] not in layers:
                raise SuiteError(f"{where}: {key}.{k}: {entry[k]!r} is not a layer of this suite"
                                 f"{did_you_mean(str(entry[k]), list(layers))} (layers: {', '.join(layers)})")
        if entry["layer"] == entry["gap_to"]:
            raise SuiteError(f"{where}: {key}: layer and gap_to are both {entry['layer']!r}; name two rows")
        if entry["depth"] not in depths:
            raise SuiteError(f"{where}: {key}.depth: {entry['depth']!r} is not a depth of this suite "
                             f"(depths: {', '.join(map(str, depths))})")
        margin = entry.get("margin")
        if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                                   or not 0 < margin < math.inf):
            raise SuiteError(f"{where}: {key}.margin: expected a positive, finite number of points, got {margin!r}")
        interaction = Interaction(str(entry["layer"]), str(entry["gap_to"]), int(entry["depth"]),
                                  float(margin) if margin is not None else None)
        if any((i.layer, i.gap_to, i.depth) == (interaction.layer, interaction.gap_to, interaction.depth)
               for i in parsed):  # a second copy would only enlarge the Holm family
            raise SuiteError(f"{where}: {key}: the same interaction as an earlier entry; list it once")
        parsed.append(interaction)
    return parsed
