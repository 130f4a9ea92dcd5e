"""A suite's `layer` string -> which classes fill the norm slots, the gate slots and the block, and what modifies it.

`learnable_scaler+layerscale`: the named norm fills the norm slots, the gate the gate slots. A gate, placement or
modifier brings its partner norm unless the combination names one (`layerscale` alone -> layernorm + layerscale).
Modifiers (`qk_norm`) add to any entry, each once; one without a partner cannot stand alone. A block family (`hc`,
`mhc`, `ngpt`) brings its own block class in place of the pre-norm block; the norm and gate it does not refuse still
fill its slots (`hc+layerscale`: LayerScale's diag(λ) on each branch's output before the streams receive it).

Refused, with one line naming the fix (LayerError, exit 2): two of a kind, a modifier twice or alone, an entry with one
it `refuses` (e.g. a gate on `peri_ln`, whose output norm already scales each branch), two init rules (the later would
overwrite the weights the earlier set), two different modules before the MLP's fc2, two entries giving the attention
one argument differently (`attn_kwargs`), a family with a placement (each brings the block), and a family's
`block_kwargs` it cannot take (`check_block_kwargs`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import DataInitRule, InitRule, LayerError, LayerSpec, StepHook, get_spec


@dataclass(frozen=True)
class LayerPlan:
    name: str
    norm: LayerSpec
    gate: LayerSpec | None = None
    placement: LayerSpec | None = None
    modifiers: tuple[LayerSpec, ...] = ()
    family: LayerSpec | None = None

    @property
    def specs(self) -> list[LayerSpec]:
        return [s for s in (self.norm, self.gate, self.placement, *self.modifiers, self.family) if s is not None]

    @property
    def block_cls(self) -> type[nn.Module]:
        if self.family is not None:
            return self.family.cls
        return self.placement.cls if self.placement else PreNormBlock

    @property
    def after_step(self) -> list[StepHook]:
        """What the training loop calls with the model after every optimizer step (nGPT's renormalisation)."""
        family = self.family.family if self.family else None
        return [family.after_step] if family is not None and family.after_step is not None else []

    def check_block_kwargs(self, block_kwargs: Mapping[str, Any]) -> None:
        """LayerError (one line) for `block_kwargs` the block cannot take: a key its class does not accept, or a
        value its family's or block class's `check_kwargs` refuses (hc's expansion rate below 1, Mix-LN's ratio
        outside [0, 1])."""
        block_cls = self.block_cls
        params = inspect.signature(block_cls.__init__).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        named = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
                 or (p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and n not in ("self", "dim", "num_heads"))]
        family = self.family.family if self.family else None
        if family is not None and family.check_kwargs is not None:
            family.check_kwargs(**block_kwargs)
        elif (check := getattr(block_cls, "check_kwargs", None)) is not None:  # a placement's own (Mix-LN's ratio)
            check(**block_kwargs)
        elif not takes_any:
            unknown = sorted(set(block_kwargs) - set(named))
            if unknown:
                raise LayerError(f"block_kwargs: {', '.join(f'`{k}`' for k in unknown)} is not an argument of "
                                 f"`{self.name}`'s block ({block_cls.__name__}); remove "
                                 f"{'it' if len(unknown) == 1 else 'them'}")

    @property
    def init_rules(self) -> list[InitRule]:
        return [s.init_rule for s in self.specs if s.init_rule]

    @property
    def data_init_rules(self) -> list[DataInitRule]:
        """Init rules that need a batch of training images (Admin's profiling pass); they run after `init_rules`."""
        return [s.data_init for s in self.specs if s.data_init]

    @property
    def mlp_norm_layer(self) -> type[nn.Module] | None:
        """The class for timm Mlp's inner norm slot, from the spec that declares one (at most one does); "norm"
        resolves to the combination's norm class."""
        declared = next((s.mlp_norm for s in self.specs if s.mlp_norm is not None), None)
        return self.norm.cls if declared == "norm" else declared  # type: ignore[return-value]

    @property
    def attn_kwargs(self) -> dict[str, Any]:
        """What the combination's entries add to every block's attention (`gated_attn`: `{"gated": True}`), merged;
        `resolve_layer` refuses entries that disagree on a key."""
        return {k: v for s in self.specs for k, v in (s.attn_kwargs or {}).items()}

    @property
    def qk_norm_layer(self) -> type[nn.Module] | None:
        """The class normalizing each head's q and k, or None: the combination's norm class when it normalizes
        (`rmsnorm+qk_norm` -> RMSNorm, `dyt+qk_norm` -> DyT), else the modifier's own (`rezero+qk_norm` ->
        LayerNorm, since `none` would leave q and k as they are)."""
        spec = next((s for s in self.specs if s.qk_norm), None)
        if spec is None:
            return None
        return self.norm.cls if getattr(self.norm.cls, "normalizes", True) else spec.cls


def resolve_layer(layer: str) -> LayerPlan:
    """Parse `name` or `name+name+...` (at most one norm, one gate, one placement; modifiers once each)."""
    by_kind: dict[str, LayerSpec] = {}
    modifiers: dict[str, LayerSpec] = {}
    for part in (p.strip() for p in layer.split("+")):
        spec = get_spec(part)
        if spec.kind == "modifier":
            if part in modifiers:
                raise LayerError(f"layer `{layer}` names the modifier `{part}` twice; name it once")
            modifiers[part] = spec
            continue
        if spec.kind in by_kind:
            kinds = "families" if spec.kind == "family" else f"{spec.kind}s"
            raise LayerError(f"layer `{layer}` names two {kinds} (`{by_kind[spec.kind].name}` and "
                             f"`{part}`); a combination takes at most one norm, one gate and one placement")
        by_kind[spec.kind] = spec
    gate, placement, norm = by_kind.get("gate"), by_kind.get("placement"), by_kind.get("norm")
    family = by_kind.get("family")
    if family is not None and placement is not None:
        raise LayerError(f"layer `{layer}`: `{family.name}` and `{placement.name}` each bring their own block (a "
                         "family replaces the residual update a placement rearranges); use one of them")
    named_norm = norm
    if not by_kind and not any(m.partner for m in modifiers.values()):
        name = next(iter(modifiers))
        raise LayerError(f"layer `{layer}`: `{name}` modifies another entry and cannot stand alone; combine it "
                         f"with one, e.g. `layernorm+{name}` or `layerscale+{name}`")
    if norm is None:
        partner = ((placement and placement.partner) or (gate and gate.partner) or (family and family.partner)
                   or next((m.partner for m in modifiers.values() if m.partner), None))
        norm = get_spec(partner or "layernorm")
    plan = LayerPlan(name=layer, norm=norm, gate=gate, placement=placement, modifiers=tuple(modifiers.values()),
                     family=family)
    _check_refusals(plan, implied=None if named_norm is not None else norm)
    with_rules = [s.name for s in plan.specs if s.init_rule is not None]
    if len(with_rules) > 1:
        raise LayerError(f"layer `{layer}` combines {' and '.join(f'`{n}`' for n in with_rules)}, whose init rules "
                         "each set the block's weights (the later would overwrite the earlier); use one of them")
    for key in {k for s in plan.specs for k in (s.attn_kwargs or {})}:
        values = {s.name: s.attn_kwargs[key] for s in plan.specs if s.attn_kwargs and key in s.attn_kwargs}
        if len(set(map(repr, values.values()))) > 1:
            raise LayerError(f"layer `{layer}` combines {' and '.join(f'`{n}`' for n in values)}, which set the "
                             f"attention's `{key}` differently; use one of them")
    mlp_norms = {s.name: s.mlp_norm for s in plan.specs if s.mlp_norm is not None}
    if len(set(mlp_norms.values())) > 1:
        raise LayerError(f"layer `{layer}` combines {' and '.join(f'`{n}`' for n in mlp_norms)}, which each "
                         "need their own module before the MLP's fc2; a combination may bring at most one")
    return plan


def _check_refusals(plan: LayerPlan, implied: LayerSpec | None = None) -> None:
    """Refuse an entry combined with one it `refuses`; the norm a combination did not name (`implied`, a partner)
    is the entry's own and never refused."""
    for spec in plan.specs:
        for other in plan.specs:
            if other is implied:
                continue
            if other is not spec and (other.kind in spec.refuses or other.name in spec.refuses):
                raise LayerError(f"layer `{plan.name}`: `{spec.name}` takes no {other.kind} (`{other.name}`): "
                                 f"{spec.refuses_why}; use `{spec.name}` without it")
