"""The layer registry: name -> LayerSpec, filled by the `@register_layer` decorator and by plugins.

A plugin package adds layers without editing normbench by declaring an entry point in the group
`normbench.layers` whose target is a module (or callable) that calls `register_layer` when loaded.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Literal

from torch import nn

from normbench.errors import UnknownLayerError, did_you_mean

Kind = Literal["norm", "gate", "placement"]
InitRule = Callable[[nn.Module], None]

ENTRY_POINT_GROUP = "normbench.layers"


@dataclass(frozen=True)
class LayerSpec:
    """One registered method.

    Attributes:
        name: registry key, as written in suites (`layerscale`).
        kind: `norm` fills the norm slots, `gate` the residual-branch gate slots, `placement` is a block class
            that decides where the norm sits (post-LN, DeepNorm).
        cls: the module class. Norms take `(dim, eps=..., device=None, dtype=None)` like timm's norm layers;
            gates take `(dim, *, depth, init_values=None, device=None, dtype=None)`; both fill their values in
            `reset_parameters()` (timm style), so a model built on the meta device can be materialized. A gate class
            with `shared_across_branches = True` is tied: a block's MLP gate uses its attention gate's parameters.
            Placements are blocks.
        formula: one line, printed by `normbench layers`.
        source: the paper or code it is faithful to.
        partner: the norm a gate or placement brings when a combination names none (`layerscale` -> `layernorm`).
        init_rule: applied to the whole model after timm's weight init, which would otherwise overwrite it. It
            only sets values: every module a method needs is built with the model (see `mlp_norm`).
        mlp_norm: a class (norm contract) for timm Mlp's inner norm slot `mlp.norm`, between the activation and fc2,
            for a method that puts a module there (Fixup's shift before fc2); None leaves the slot `nn.Identity`.
    """

    name: str
    kind: Kind
    cls: type[nn.Module]
    formula: str
    source: str
    partner: str | None = None
    init_rule: InitRule | None = None
    mlp_norm: type[nn.Module] | None = None


_REGISTRY: dict[str, LayerSpec] = {}
_plugins_loaded = False


def register_layer(
    name: str,
    *,
    kind: Kind,
    formula: str,
    source: str,
    partner: str | None = None,
    init_rule: InitRule | None = None,
    mlp_norm: type[nn.Module] | None = None,
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: register `cls` under `name`. Re-registering a name warns and replaces it."""
    if kind not in ("norm", "gate", "placement"):
        raise ValueError(f"kind must be norm, gate or placement, not {kind!r}")
    if "+" in name:
        raise ValueError(f"layer name {name!r} may not contain '+': it joins names in a combination")

    def decorator(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _REGISTRY:
            warnings.warn(f"normbench: overwriting layer {name!r} with {cls.__module__}.{cls.__qualname__}",
                          stacklevel=2)
        _REGISTRY[name] = LayerSpec(name, kind, cls, formula, source, partner, init_rule, mlp_norm)
        return cls

    return decorator


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()
        if callable(loaded) and not isinstance(loaded, type):
            loaded()


def get_spec(name: str) -> LayerSpec:
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownLayerError(f"unknown layer `{name}`{did_you_mean(name, _REGISTRY)}; "
                                "`normbench layers` lists them all") from None


def get_layer(name: str) -> type[nn.Module]:
    """The registered class for `name` (a single entry, not a `+` combination)."""
    return get_spec(name).cls


def list_layers(pattern: str = "*", kind: Kind | None = None) -> list[str]:
    """Registered names matching a shell-style `pattern`, optionally of one kind, sorted."""
    _load_plugins()
    return sorted(n for n, s in _REGISTRY.items()
                  if fnmatch.fnmatchcase(n, pattern) and (kind is None or s.kind == kind))
