"""The registry of normalization and gating layers. Importing this package registers the built-in families."""

from normbench.layers import blocks, gates, norms  # noqa: F401  (register on import)
from normbench.layers.blocks import DeepNormBlock, PostNormBlock, PreNormBlock
from normbench.layers.compose import LayerPlan, resolve_layer
from normbench.layers.gates import (
    FixupGate,
    FixupGateOfficial,
    LayerScale,
    ReZero,
    ReZeroShared,
    SkipInit,
    cait_init_values,
)
from normbench.layers.norms import (
    DyT,
    FixupBias,
    LayerNorm,
    LearnableScaler,
    LearnableScaler2d,
    LearnableScalerOnes,
    NoNorm,
    RMSNorm,
    TFixupNoNorm,
)
from normbench.layers.registry import LayerSpec, get_layer, get_spec, list_layers, register_layer

__all__ = [
    "DeepNormBlock", "DyT", "FixupBias", "FixupGate", "FixupGateOfficial", "LayerNorm", "LayerPlan", "LayerScale",
    "LayerSpec", "LearnableScaler", "LearnableScaler2d", "LearnableScalerOnes", "NoNorm", "PostNormBlock",
    "PreNormBlock", "RMSNorm", "ReZero", "ReZeroShared", "SkipInit", "TFixupNoNorm", "cait_init_values", "get_layer",
    "get_spec", "list_layers", "register_layer", "resolve_layer",
]
