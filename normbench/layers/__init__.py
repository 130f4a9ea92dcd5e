"""The registry of normalization and gating layers. Importing this package registers the built-in families.

One file per family, its modules beside its init rule: norms.py (layernorm, rmsnorm, learnable_scaler, dyt, derf,
none), layerscale.py, rezero.py (rezero, rezero_per_branch, skipinit), fixup.py (fixup_bias, fixup, fixup_official),
tfixup.py, blocks.py (pre-norm, post_ln), deepnorm.py, qk_norm.py (a modifier), res_post_norm.py (res_post_norm,
res_post_norm_olmo2), peri_ln.py, lns.py, mix_ln.py, admin.py (its init profiles training images), depth_mup.py,
scaled_init.py, normformer.py; the block families (kind `family`: their own block, streams and after-step hook)
hyper_connections.py (hc, hc_dynamic), mhc.py, ngpt.py. The 2025-2026 entries: seednorm.py, hybridnorm.py
(hybridnorm, hybridnorm_star), gated_attention.py (gated_attn, a modifier), gpas.py, completep.py, and the families
value_residual.py, frac_connections.py, attn_res.py; attention.py is timm's Attention with the slots some of them
act in. registry.py holds the registry and imports none of the
others; plugins.py (imported here, which hooks it into every lookup) loads layers from outside normbench and hands
Python-registered ones to worker processes; compose.py turns a `layer` string into a LayerPlan, whose init_rules run
on the built model; listing.py prints the registry.
"""

# imported to register: the families on import, plugins its loading hook
from normbench.layers import (  # noqa: F401
    admin,
    attn_res,
    completep,
    deepnorm,
    depth_mup,
    fixup,
    frac_connections,
    gated_attention,
    gpas,
    hybridnorm,
    hyper_connections,
    layerscale,
    lns,
    mhc,
    mix_ln,
    ngpt,
    normformer,
    norms,
    peri_ln,
    plugins,
    qk_norm,
    res_post_norm,
    rezero,
    scaled_init,
    seednorm,
    tfixup,
    value_residual,
)
from normbench.layers.admin import AdminBlock, admin_init
from normbench.layers.attention import SlotAttention
from normbench.layers.attn_res import AttnResBlock
from normbench.layers.blocks import PostNormBlock, PreNormBlock
from normbench.layers.completep import CompletePScale
from normbench.layers.compose import LayerPlan, resolve_layer
from normbench.layers.deepnorm import DeepNormBlock, deepnorm_init
from normbench.layers.depth_mup import DepthMuPScale, depth_mup_init
from normbench.layers.fixup import (
    FixupBias,
    FixupGate,
    FixupGateOfficial,
    fixup_init,
    fixup_official_init,
    fixup_scalars,
)
from normbench.layers.frac_connections import FracConnectionBlock
from normbench.layers.gated_attention import GatedAttention
from normbench.layers.gpas import GPASBlock
from normbench.layers.hybridnorm import HybridNormBlock, HybridNormStarBlock
from normbench.layers.hyper_connections import DynamicHyperConnectionBlock, StaticHyperConnectionBlock
from normbench.layers.layerscale import LayerScale, cait_init_values
from normbench.layers.lns import LNSBlock, lns_scale
from normbench.layers.mhc import MHCBlock, sinkhorn_knopp
from normbench.layers.mix_ln import MixLNBlock, post_ln_blocks
from normbench.layers.ngpt import NGPTBlock, ngpt_normalize
from normbench.layers.normformer import HeadScale, NormFormerBlock
from normbench.layers.norms import (
    Derf,
    DyT,
    LayerNorm,
    LearnableScaler,
    LearnableScaler2d,
    LearnableScalerOnes,
    NoNorm,
    RMSNorm,
)
from normbench.layers.peri_ln import PeriLNBlock
from normbench.layers.qk_norm import QKNorm
from normbench.layers.registry import (
    Family,
    LayerError,
    LayerSpec,
    get_layer,
    get_spec,
    list_layers,
    register_layer,
)
from normbench.layers.res_post_norm import OLMo2Block, ResPostNormBlock, swin_respostnorm_init
from normbench.layers.rezero import ReZero, ReZeroShared, SkipInit
from normbench.layers.scaled_init import ScaledInitBlock, gpt2_scaled_init, scaled_init_std
from normbench.layers.seednorm import SeeDNorm
from normbench.layers.tfixup import TFixupNoNorm, tfixup_init
from normbench.layers.value_residual import ValueResidualBlock

__all__ = [
    "AdminBlock", "AttnResBlock", "CompletePScale", "DeepNormBlock", "DepthMuPScale", "Derf", "DyT",
    "DynamicHyperConnectionBlock", "Family", "FixupBias", "FixupGate", "FixupGateOfficial", "FracConnectionBlock",
    "GPASBlock", "GatedAttention", "HeadScale", "HybridNormBlock", "HybridNormStarBlock", "LNSBlock", "LayerError",
    "LayerNorm", "LayerPlan", "LayerScale", "LayerSpec", "LearnableScaler", "LearnableScaler2d",
    "LearnableScalerOnes", "MHCBlock", "MixLNBlock", "NGPTBlock", "NoNorm", "NormFormerBlock", "OLMo2Block",
    "PeriLNBlock", "PostNormBlock", "PreNormBlock", "QKNorm", "RMSNorm", "ReZero", "ReZeroShared", "ResPostNormBlock",
    "ScaledInitBlock", "SeeDNorm", "SkipInit", "SlotAttention", "StaticHyperConnectionBlock", "TFixupNoNorm",
    "ValueResidualBlock", "admin_init", "cait_init_values", "deepnorm_init", "depth_mup_init", "fixup_init",
    "fixup_official_init", "fixup_scalars", "get_layer", "get_spec", "gpt2_scaled_init", "list_layers", "lns_scale",
    "ngpt_normalize", "post_ln_blocks", "register_layer", "resolve_layer", "scaled_init_std", "sinkhorn_knopp",
    "swin_respostnorm_init", "tfixup_init",
]
