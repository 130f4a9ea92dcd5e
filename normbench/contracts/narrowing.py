"""A `--set` that narrows a suite (`--set matrix.layer=[layernorm,rezero]`, `--set matrix.depth=[2]`) leaves out
layers or depths its claims, interactions, baseline and `lr_by_layer` grids name: those are dropped, a line each
saying so, as a quick try of a big suite expects, instead of refusing the suite. Only what the override made
inapplicable goes: a claim or baseline that the file itself gets wrong, or that a `--set` names, is still refused by
contracts/suite.py."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from normbench.contracts.recipe import ModelConfig

# a claim's (or an interaction's) other keys name layers: layer, beats, steadier_than or gap_to
NOT_LAYERS = ("depth", "by", "claimed", "margin")
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}


def drop_left_out(before: dict[str, Any], after: dict[str, Any], set_keys: set[str]) -> list[str]:
    """Drop from `after` (the suite with its overrides) the claims, interactions, lr grids and the baseline that
    `before` (the file) could test and `after` no longer can; returns one line per thing dropped. Keys in `set_keys`
    (the top-level keys the overrides set) are the user's own words and are left for the suite's checks."""
    was, now = (_listed(before, "layer"), _listed(before, "depth")), (_listed(after, "layer"), _listed(after, "depth"))
    notes = []
    baseline = after.get("baseline")
    if "baseline" not in set_keys and baseline in was[0] and baseline not in now[0]:
        after["baseline"] = None  # not the default rule's layernorm: which layer is the reference is the user's call
        notes.append(f"--set leaves the baseline {baseline} out of the matrix, so no layer is compared with a baseline "
                     "(no paired comparisons); --set baseline=LAYER names another")
    if "lr_by_layer" not in set_keys:
        notes += _drop_grids(before, after, was[0], now[0])
    for section in ("claims", "interactions"):
        entries = after.get(section)
        if section in set_keys or not isinstance(entries, list):
            continue
        kept = []
        for i, entry in enumerate(entries):
            gone = _left_out(entry, was, now)
            if gone:
                notes.append(f"--set leaves {', '.join(gone)} out of the suite: dropped {section}[{i}] "
                             f"({_words(entry)}), which no longer applies")
            else:
                kept.append(entry)
        after[section] = kept
    return notes


def _drop_grids(before: dict[str, Any], after: dict[str, Any], was: list[Any], now: list[Any]) -> list[str]:
    """`lr_by_layer` grids: all of them when the overrides change matrix.lr (they sit on the file's lattice and were
    chosen beside its grid), else those of the layers the overrides leave out."""
    grids = after.get("lr_by_layer")
    if not isinstance(grids, dict) or not grids:
        return []
    if _matrix_lr(before) != _matrix_lr(after):
        after["lr_by_layer"] = {}
        return [f"--set changes matrix.lr: dropped the lr_by_layer grids of {', '.join(map(str, grids))}, so every "
                "layer trains the new lrs (--set lr_by_layer={...} gives grids of their own)"]
    gone = [layer for layer in grids if layer in was and layer not in now]
    for layer in gone:
        del grids[layer]
    return [f"--set leaves {layer} out of the suite: dropped its lr_by_layer grid" for layer in gone]


def _matrix_lr(raw: dict[str, Any]) -> Any:
    matrix = raw.get("matrix")
    return matrix.get("lr") if isinstance(matrix, dict) else None


def _listed(raw: dict[str, Any], axis: str) -> list[Any]:
    """The layers or depths a suite's YAML trains: its matrix axis, else its model key, else the recipe default."""
    matrix, model = raw.get("matrix"), raw.get("model")
    if isinstance(matrix, dict) and axis in matrix:
        values = matrix[axis]
        return values if isinstance(values, list) else [values]
    return [model[axis] if isinstance(model, dict) and axis in model else _DEFAULTS[axis]]


def _left_out(claim: Any, was: tuple[list[Any], list[Any]], now: tuple[list[Any], list[Any]]) -> list[str]:
    """What of a claim the file trains and the override does not (layers, `depth D`); [] if it still applies, or if
    the file already could not test it (its own mistake, named by the suite's checks)."""
    if not isinstance(claim, dict):
        return []
    layers = [value for key, value in claim.items() if key not in NOT_LAYERS]
    depth = claim.get("depth")
    if not (all(layer in was[0] for layer in layers) and depth in was[1]):
        return []
    return [str(layer) for layer in layers if layer not in now[0]] + ([f"depth {depth}"] if depth not in now[1] else [])


def _words(claim: dict[str, Any]) -> str:
    """`layer: layerscale, beats: layernorm, depth: 8`, as the file wrote it."""
    return ", ".join(f"{key}: {value}" for key, value in claim.items())
