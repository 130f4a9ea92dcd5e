"""A layer's own hyper-parameters in `normbench tune`: `tune.space` keys `layer.<name>` (docs/protocol.md, "Tuned").

A registry entry may declare tunables (layers/registry.py `Tunable`: LayerScale's init ε within CaiT's values,
hyper-connections' expansion rate within the rates their paper trained), each with its source's range. A suite asks
for one with `layer.<name>: source` (the source's range) or its own range inside it; a row whose layer declares no
such tunable samples nothing for it, so every row still gets the same number of trials. A sampled value reaches the
cell through the tunable's target: a ModelConfig field (`init_values`) or a key of `block_kwargs` / `norm_kwargs`.
"""

from __future__ import annotations

import math
from typing import Any

from normbench.errors import SuiteError

PREFIX = "layer."
SOURCE = "source"  # `layer.<name>: source`: the source's own range


def is_layer_key(key: str) -> bool:
    return key.startswith(PREFIX)


def declared(layer: str) -> dict[str, Any]:
    """`{name: Tunable}` of every entry in the layer string `layer` (a `+` combination: each entry's)."""
    from normbench.layers import resolve_layer

    return {t.name: t for spec in resolve_layer(layer).specs for t in spec.tunables}


def check_layer_space(key: str, dist: Any, layers: list[str], where: str) -> None:
    """A `layer.<name>` entry: some layer of the suite declares `<name>`, and the range asked for lies within every
    declaring layer's source range (a subset of its choices). SuiteError (exit 2) naming the key and the fix."""
    name, at = key[len(PREFIX):], f"{where}: tune.space.{key}"
    owners = {layer: t for layer in layers if (t := declared(layer).get(name)) is not None}
    if not owners:
        known = sorted({n for layer in layers for n in declared(layer)})
        raise SuiteError(f"{at}: no layer of this suite declares a tunable `{name}`"
                         + (f"; theirs: {', '.join(PREFIX + n for n in known)}" if known
                            else " (`normbench layers` names each entry's tunables); drop the key"))
    if dist == SOURCE:
        return
    for layer, tunable in owners.items():
        if tunable.choices:
            asked = dist.get("choices") if isinstance(dist, dict) else None
            if not isinstance(asked, list) or not asked or not set(asked) <= set(tunable.choices):
                raise SuiteError(f"{at}: {layer}'s source tried {list(tunable.choices)} ({tunable.source}); ask for "
                                 f"{{choices: [...]}} among them, or `{SOURCE}`")
            continue
        low, high = (dist.get("low"), dist.get("high")) if isinstance(dist, dict) else (None, None)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high))
        if not numbers or not tunable.low <= low < high <= tunable.high:  # type: ignore[operator]
            raise SuiteError(f"{at}: outside {layer}'s source range [{tunable.low:g}, {tunable.high:g}] "
                             f"({tunable.source}); ask for {{low, high}} within it, or `{SOURCE}`")


def space_for(space: dict[str, Any], layer: str) -> dict[str, Any]:
    """The search space of one row: the recipe's keys, and the `layer.<name>` keys its layer declares (at the
    source's range where the suite says `source`)."""
    own = declared(layer)
    row = {}
    for key, dist in space.items():
        if not is_layer_key(key):
            row[key] = dist
        elif (tunable := own.get(key[len(PREFIX):])) is not None:
            row[key] = tunable.space() if dist == SOURCE else dist
    return row


def only_inits(space: dict[str, Any], layer: str) -> bool:
    """Whether every `layer.<name>` key of a row's search space (`space_for`) only sets a parameter's first value
    (layers/registry.py `Tunable.init_only`): its trials build the same modules, so they may fuse."""
    own = declared(layer)
    return all(own[key[len(PREFIX):]].init_only for key in space if is_layer_key(key))


def distance_text(value: Any, reference: Any) -> str:
    """How far a tuned value moved from the grid recipe's: 'x3.16' for positive numbers (a ratio: lrs and inits live
    on a log scale), '+0.10' for others, '=' when unchanged."""
    if value == reference:
        return "="
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (value, reference)):
        ratio = value / reference
        return f"x{ratio:.3g}" if ratio >= 1 else f"/{1 / ratio:.3g}"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, reference)) \
            and math.isfinite(value - reference):
        return f"{value - reference:+.3g}"
    return f"{reference} -> {value}"
