"""The registry of normalization and gating layers. Importing this package registers the built-in families.

One file per family, its modules beside its init rule: norms.py (layernorm, rmsnorm, learnable_scaler, dyt, none),
layerscale.py, rezero.py (rezero, rezero_per_branch, skipinit), fixup.py (fixup_bias, fixup, fixup_official),
tfixup.py, blocks.py (pre-norm, post_ln), deepnorm.py. registry.py holds the registry and imports none of the
others; plugins.py (imported here, which hooks it into every lookup) loads layers from outside normbench and hands
Python-registered ones to worker processes; compose.py turns a `layer` string into a LayerPlan, whose init_rules run
on the built model; listing.py prints the registry.
"""

# imported to register: the families on import, plugins its loading hook
from normbench.layers import deepnorm, fixup, layerscale, norms, plugins, rezero, tfixup  # noqa: F401
from normbench.layers.blocks import PostNormBlock, PreNormBlock
from normbench.layers.compose import LayerPlan, resolve_layer
from normbench.layers.deepnorm import DeepNormBlock, deepnorm_init
from normbench.layers.fixup import (
    FixupBias,
    FixupGate,
    FixupGateOfficial,
    fixup_init,
    fixup_official_init,
    fixup_scalars,
)
from normbench.layers.layerscale import LayerScale, cait_init_values
from normbench.layers.norms import (
    DyT,
    LayerNorm,
    LearnableScaler,
    LearnableScaler2d,
    LearnableScalerOnes,
    NoNorm,
    RMSNorm,
)
from normbench.layers.registry import LayerSpec, get_layer, get_spec, list_layers, register_layer
from normbench.layers.rezero import ReZero, ReZeroShared, SkipInit
from normbench.layers.tfixup import TFixupNoNorm, tfixup_init

__all__ = [
    "DeepNormBlock", "DyT", "FixupBias", "FixupGate", "FixupGateOfficial", "LayerNorm", "LayerPlan", "LayerScale",
    "LayerSpec", "LearnableScaler", "LearnableScaler2d", "LearnableScalerOnes", "NoNorm", "PostNormBlock",
    "PreNormBlock", "RMSNorm", "ReZero", "ReZeroShared", "SkipInit", "TFixupNoNorm", "cait_init_values",
    "deepnorm_init", "fixup_init", "fixup_official_init", "fixup_scalars", "get_layer", "get_spec", "list_layers",
    "register_layer", "resolve_layer", "tfixup_init",
]
