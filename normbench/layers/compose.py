"""A suite's `layer` string -> which classes fill the norm slots, the gate slots and the block.

`learnable_scaler+layerscale`: the named norm fills the norm slots, the gate the gate slots. A gate or placement
brings its partner norm unless the combination names one (`layerscale` alone -> layernorm + layerscale).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from normbench.errors import NormbenchError
from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import InitRule, LayerSpec, get_spec


@dataclass(frozen=True)
class LayerPlan:
    name: str
    norm: LayerSpec
    gate: LayerSpec | None = None
    placement: LayerSpec | None = None

    @property
    def specs(self) -> list[LayerSpec]:
        return [s for s in (self.norm, self.gate, self.placement) if s is not None]

    @property
    def block_cls(self) -> type[nn.Module]:
        return self.placement.cls if self.placement else PreNormBlock

    @property
    def init_rules(self) -> list[InitRule]:
        return [s.init_rule for s in self.specs if s.init_rule]

    @property
    def mlp_norm_layer(self) -> type[nn.Module] | None:
        """The class for timm Mlp's inner norm slot, from the spec that declares one (at most one does)."""
        return next((s.mlp_norm for s in self.specs if s.mlp_norm is not None), None)


def resolve_layer(layer: str) -> LayerPlan:
    """Parse `name` or `name+name+...` (at most one norm, one gate, one placement) into a LayerPlan."""
    by_kind: dict[str, LayerSpec] = {}
    for part in (p.strip() for p in layer.split("+")):
        spec = get_spec(part)
        if spec.kind in by_kind:
            raise NormbenchError(f"layer `{layer}` names two {spec.kind}s (`{by_kind[spec.kind].name}` and "
                                 f"`{part}`); a combination takes at most one norm, one gate and one placement")
        by_kind[spec.kind] = spec
    gate, placement = by_kind.get("gate"), by_kind.get("placement")
    norm = by_kind.get("norm")
    if norm is None:
        partner = (placement and placement.partner) or (gate and gate.partner)
        norm = get_spec(partner or "layernorm")
    plan = LayerPlan(name=layer, norm=norm, gate=gate, placement=placement)
    mlp_norms = {s.name: s.mlp_norm for s in plan.specs if s.mlp_norm is not None}
    if len(set(mlp_norms.values())) > 1:
        raise NormbenchError(f"layer `{layer}` combines {' and '.join(f'`{n}`' for n in mlp_norms)}, which each "
                             "need their own module before the MLP's fc2; a combination may bring at most one")
    return plan
