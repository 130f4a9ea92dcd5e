"""The layer registry: name -> LayerSpec, filled by the `@register_layer` decorator and by plugins.

Plugins (modules that call `register_layer` when imported) are found by normbench/layers/plugins.py before the first
lookup. A layer registered by other Python code remembers the module whose import registers it (`LayerSpec.origin`),
so that `--workers` processes can import it too (plugins.worker_modules).
"""

from __future__ import annotations

import fnmatch
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from normbench.errors import NormbenchError, UnknownLayerError, did_you_mean

Kind = Literal["norm", "gate", "placement", "modifier", "family"]
KINDS = ("norm", "gate", "placement", "modifier", "family")
InitRule = Callable[[nn.Module], None]
DataInitRule = Callable[[nn.Module, torch.Tensor], None]  # (model, training images (B, C, H, W)) -> None
StepHook = Callable[[nn.Module], None]  # (model) -> None, after every optimizer step
StreamFactory = Callable[..., nn.Module]  # (dim, *, depth, **block_kwargs) -> module
HeadFactory = Callable[..., nn.Module]  # (dim, num_classes, device=None, dtype=None) -> classifier


class LayerError(NormbenchError):
    """A layer string or build that cannot work as asked (a modifier alone, a combination that makes no sense, a
    data-dependent init without data); the message names the fix. Exit code 2, like every NormbenchError."""


@dataclass(frozen=True)
class Family:
    """What a block family (kind `family`) brings beside its block class, `LayerSpec.cls`. A family changes the
    residual stream itself (hyper-connections' n streams, nGPT's hypersphere), so it is a sibling of the slot-based
    block rather than a slot in it; each part here is optional, and the template uses `nn.Identity()` or its default
    where a family brings none.

    Attributes:
        expand: `(dim, *, depth, **block_kwargs) -> module` mapping the embedded tokens (B, N, C) to what the blocks
            carry (hyper-connections: n copies, (B, N, n, C)); run after the position embedding, before block 0.
        merge: the same signature; maps the last block's output back to (B, N, C), before the final norm.
        head: `(dim, num_classes, device=None, dtype=None) -> module` replacing the `nn.Linear` classifier (nGPT's
            normalised head with its logit scale); `reset_classifier` builds it too.
        after_step: `(model) -> None`, called by the training loop (and `normbench bench`) after every optimizer step
            on every rank, before the step's telemetry; it changes weights in place, so it runs under its own
            `torch.no_grad()` (nGPT's renormalisation of every weight matrix, `ngpt_normalize`).
        check_kwargs: `(**block_kwargs) -> None`, raising LayerError on a value the family cannot take (an expansion
            rate below 1); run when a suite is read and when the model is built.
    """

    expand: StreamFactory | None = None
    merge: StreamFactory | None = None
    head: HeadFactory | None = None
    after_step: StepHook | None = None
    check_kwargs: Callable[..., None] | None = None


@dataclass(frozen=True)
class Tunable:
    """A hyper-parameter of a layer that `normbench tune` may search, within the range its source used.

    Attributes:
        name: the suite's key under `tune.space`, `layer.<name>` (e.g. `layer.init_values`).
        target: where a sampled value goes in the cell's recipe: a ModelConfig field (`init_values`) or a key of
            one of its dicts (`block_kwargs.expansion_rate`, `norm_kwargs.alpha_init`).
        low, high, log: a float range (log scale when `log`); or `choices`, the values the source tried.
        source: where the range comes from (the paper's table or rule).
        default: the value the entry takes at a model depth when the recipe sets none (CaiT's ε rule), so a tuned
            value's distance from it can be said.
        init_only: the value sets a parameter's initial value and nothing else (LayerScale's ε, DyT's α0): cells
            that differ in it build the same modules, so a fused group may hold them (train/fusion_rules.py).
    """

    name: str
    target: str
    source: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    default: Callable[[int], Any] | None = None  # the entry's own value at a depth, when the suite sets none
    init_only: bool = False

    def space(self) -> dict[str, Any]:
        """The range as a `tune.space` entry."""
        if self.choices:
            return {"choices": list(self.choices)}
        return {"low": self.low, "high": self.high, "log": self.log}


@dataclass(frozen=True)
class LayerSpec:
    """One registered method.

    Attributes:
        name: registry key, as written in suites (`layerscale`).
        kind: `norm` fills the norm slots, `gate` the residual-branch gate slots, `placement` is a block class
            that decides where the norm sits (post-LN, DeepNorm); `modifier` adds to another entry without filling a
            slot (QK-norm inside attention): any number per combination, each once, and one without a partner cannot
            stand alone. `family` is a block family (`Family`): its own block class (`cls`, built from timm's
            Attention and Mlp) plus what runs before the first block, after the last, and after each optimizer step.
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
        origin: for a layer registered from Python outside normbench and its plugins, the module whose import
            registers it (`__main__` for a script or notebook): what a worker process imports to know the layer.
            None for built-in and plugin layers, which every process loads by itself.
        data_init: a data-dependent init rule `(model, images)`, run after every `init_rule` on a batch of
            training images the model is built with (`init_images=`; Admin's profiling pass). Building such a layer
            without images is a LayerError.
        qk_norm: the entry puts a norm on each head's q and k inside timm's Attention (`qk_norm=True`): the
            combination's norm class when it normalizes (`normalizes`, see norms.py), else this spec's `cls`.
        mlp_norm may also be "norm": the combination's norm class (NormFormer's norm after the MLP's activation).
        refuses: kinds or names this entry does not combine with; `refuses_why` says why (one clause). A refused
            `norm` refuses only a norm the combination names, not the entry's own partner.
        family: for kind `family`, its expand/merge/head/after-step parts (`Family`); None otherwise.
        tunables: the hyper-parameters `normbench tune` may search for this entry (`Tunable`), each within its
            source's range; searched only where a suite's `tune.space` asks (`layer.<name>`).
        attn_kwargs: keyword arguments this entry adds to the attention every block builds (timm's `Attention`, or
            the block's own `attention_cls`): `{"gated": True}` for gated attention's sigmoid gate on the heads'
            output. Entries of one combination may not disagree on a key.
    """

    name: str
    kind: Kind
    cls: type[nn.Module]
    formula: str
    source: str
    partner: str | None = None
    init_rule: InitRule | None = None
    mlp_norm: type[nn.Module] | Literal["norm"] | None = None
    origin: str | None = None
    data_init: DataInitRule | None = None
    qk_norm: bool = False
    refuses: tuple[str, ...] = ()
    refuses_why: str = ""
    family: Family | None = None
    attn_kwargs: Mapping[str, Any] | None = None
    tunables: tuple[Tunable, ...] = ()


_REGISTRY: dict[str, LayerSpec] = {}
_BUILT_IN = "normbench.layers."
_loading_plugins = False  # set while plugins.load() runs


def register_layer(
    name: str,
    *,
    kind: Kind,
    formula: str,
    source: str,
    partner: str | None = None,
    init_rule: InitRule | None = None,
    mlp_norm: type[nn.Module] | Literal["norm"] | None = None,
    data_init: DataInitRule | None = None,
    qk_norm: bool = False,
    refuses: tuple[str, ...] = (),
    refuses_why: str = "",
    family: Family | None = None,
    attn_kwargs: Mapping[str, Any] | None = None,
    tunables: tuple[Tunable, ...] = (),
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: register `cls` under `name`. Re-registering a name warns and replaces it."""
    if kind not in KINDS:
        raise ValueError(f"kind must be norm, gate, placement, modifier or family, not {kind!r}")
    if (family is not None) != (kind == "family"):
        raise ValueError(f"layer {name!r}: `family=Family(...)` goes with kind='family' and only with it")
    if "+" in name:
        raise ValueError(f"layer name {name!r} may not contain '+': it joins names in a combination")
    origin = _origin()

    def decorator(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _REGISTRY:
            warnings.warn(f"normbench: overwriting layer {name!r} with {cls.__module__}.{cls.__qualname__}",
                          stacklevel=2)
        _REGISTRY[name] = LayerSpec(name, kind, cls, formula, source, partner=partner, init_rule=init_rule,
                                    mlp_norm=mlp_norm, origin=origin, data_init=data_init, qk_norm=qk_norm,
                                    refuses=refuses, refuses_why=refuses_why, family=family,
                                    attn_kwargs=dict(attn_kwargs) if attn_kwargs else None,
                                    tunables=tuple(tunables))
        return cls

    return decorator


def _origin() -> str | None:
    """LayerSpec.origin of the registration under way: the module whose import runs it, i.e. the nearest module body
    on the call stack (`__main__` for a script, a notebook, or a function called from one); None for a plugin or a
    built-in layer. Frame 2 is register_layer's caller."""
    if _loading_plugins:
        return None
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    module = frame.f_globals.get("__name__", "__main__") if frame is not None else "__main__"
    return None if module.startswith(_BUILT_IN) else module


# Plugin loading hooks in here (normbench.layers.plugins, imported by the package's __init__) instead of this module
# importing it: the registry imports none of its users, so the layers package has no import circle.
_before_lookup: list[Callable[[], None]] = []   # run before every lookup (plugins.load: once per process)
_unknown_notes: list[Callable[[], str]] = []    # appended to an unknown-layer message (plugins.failed_note)


def on_lookup(before: Callable[[], None], note: Callable[[], str]) -> None:
    """Run `before` ahead of every lookup, and add `note()` to an unknown-layer message."""
    _before_lookup.append(before)
    _unknown_notes.append(note)


def _load_plugins() -> None:
    for hook in _before_lookup:
        hook()


def get_spec(name: str) -> LayerSpec:
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        notes = "".join(note() for note in _unknown_notes)
        raise UnknownLayerError(f"unknown layer `{name}`{did_you_mean(name, _REGISTRY)}; "
                                f"`normbench layers` lists them all{notes}") from None


def get_layer(name: str) -> type[nn.Module]:
    """The registered class for `name` (a single entry, not a `+` combination)."""
    return get_spec(name).cls


def list_layers(pattern: str = "*", kind: Kind | None = None) -> list[str]:
    """Registered names matching a shell-style `pattern`, optionally of one kind, sorted."""
    _load_plugins()
    return sorted(n for n, s in _REGISTRY.items()
                  if fnmatch.fnmatchcase(n, pattern) and (kind is None or s.kind == kind))
