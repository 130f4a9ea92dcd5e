"""Probe-only layers: Peri-LN and NormFormer with each thing their sources do at init that this template does not.

Not registry entries (nothing trains them): a plugin module for `normbench probe`, to say which difference makes the
two collapse at init here (docs/layers.md, "Peri-LN and NormFormer at init"):

    PYTHONPATH=scripts NORMBENCH_LAYER_MODULES=init_variants normbench probe --layers layernorm \
        layernorm_fairseq_init peri_ln peri_ln_embed_norm peri_ln_megatron_init peri_ln_out_gamma normformer \
        normformer_fairseq_init normformer_out_gamma --depth 36 --dim 64 768 --heads 4 12 --batch-size 16 \
        --out results/probe-init-variants

- `*_embed_norm`: a norm on the embedded tokens before block 0 (Peri-LN's optional "initial embedding
  normalization"); it lives in block 0 (`embed_norm`), the one place a placement can put it, so the probe's
  `rms_embed` is still the embedding's RMS before that norm.
- `*_megatron_init`: Megatron-LM's init, which Peri-LN's experiments train with: every Linear N(0, 0.02²), the
  residual output projections (attn.proj, mlp.fc2) N(0, (0.02/√(2·depth))²).
- `*_fairseq_init`: fairseq's, which NormFormer's code trains with (fairseq/modules/multihead_attention.py
  `reset_parameters`, transformer_layer.py `build_fc1/2`): q, k, v each Xavier-uniform with gain 1/√2, the output
  projection Xavier-uniform, fc1 and fc2 PyTorch's default Linear init.
- `peri_ln_out_gamma` and `normformer_out_gamma` (the branch-output norm's γ at 1/√(2·depth), not a source's) began
  here and are registry entries now (normbench/layers/peri_ln.py, normformer.py), so they train as well as probe.
"""

import math

import torch
from torch import nn

from normbench.layers.blocks import PreNormBlock
from normbench.layers.normformer import NormFormerBlock
from normbench.layers.peri_ln import PeriLNBlock
from normbench.layers.registry import register_layer
from normbench.layers.res_post_norm import GATE_AFTER_NORM

MEGATRON_STD = 0.02


@torch.no_grad()
def megatron_init(model: nn.Module) -> None:
    """Megatron-LM's `init_method_normal(0.02)` for every Linear, `scaled_init_method_normal` for attn.proj and
    mlp.fc2 (std 0.02/√(2·depth)); the patch embedding, the ViT's token embedding, keeps the template's."""
    blocks = model.blocks  # type: ignore[attr-defined]
    for module in blocks.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=MEGATRON_STD)
    for block in blocks:
        for linear in (block.attn.proj, block.mlp.fc2):
            nn.init.normal_(linear.weight, std=MEGATRON_STD / math.sqrt(2 * len(blocks)))


@torch.no_grad()
def fairseq_init(model: nn.Module) -> None:
    """fairseq's MultiheadAttention and FFN init on timm's fused qkv: each of q, k, v (a C x C slice) Xavier-uniform
    with gain 1/√2 and PyTorch's default bias, proj Xavier-uniform with bias 0, fc1 and fc2 `reset_parameters()`."""
    for block in model.blocks:  # type: ignore[attr-defined]
        qkv = block.attn.qkv
        dim = qkv.weight.shape[1]
        for i in range(3):
            nn.init.xavier_uniform_(qkv.weight[i * dim:(i + 1) * dim], gain=1 / math.sqrt(2))
        if qkv.bias is not None:
            nn.init.uniform_(qkv.bias, -1 / math.sqrt(dim), 1 / math.sqrt(dim))
        nn.init.xavier_uniform_(block.attn.proj.weight)
        nn.init.zeros_(block.attn.proj.bias)
        block.mlp.fc1.reset_parameters()
        block.mlp.fc2.reset_parameters()



class _EmbedNorm:
    """Block 0 normalises the stream it receives (the embedded tokens) before its own forward."""

    embed_norm: nn.Module | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return super().forward(x)  # type: ignore[misc]


@register_layer("peri_ln_embed_norm", kind="placement", partner="layernorm", refuses=("gate",),
                refuses_why=GATE_AFTER_NORM, formula="peri_ln plus a norm on the embeddings before block 0",
                source="Kim et al. 2025, Peri-LN, Sec. 3: the optional initial embedding normalization (probe only)")
class PeriLNEmbedNormBlock(_EmbedNorm, PeriLNBlock):
    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer, block_index: int = 0, **kwargs) -> None:
        super().__init__(dim, num_heads, depth=depth, norm_layer=norm_layer, block_index=block_index, **kwargs)
        self.embed_norm = norm_layer(dim) if block_index == 0 else None


@register_layer("peri_ln_megatron_init", kind="placement", partner="layernorm", init_rule=megatron_init,
                refuses=("gate",), refuses_why=GATE_AFTER_NORM,
                formula="peri_ln with Megatron-LM's init (Linear N(0, 0.02²), output projections 0.02/√(2·depth))",
                source="NVIDIA/Megatron-LM init_method_normal and scaled_init_method_normal, the code Peri-LN's "
                       "experiments train with (probe only)")
class PeriLNMegatronBlock(PeriLNBlock):
    """peri_ln's block; `megatron_init` is the difference."""


@register_layer("normformer_fairseq_init", kind="placement", partner="layernorm", mlp_norm="norm",
                init_rule=fairseq_init, formula="normformer with fairseq's init (Xavier q/k/v gain 1/√2, Xavier "
                                                "out_proj, default fc1/fc2)",
                source="facebookresearch/fairseq multihead_attention.py reset_parameters, transformer_layer.py "
                       "build_fc1/build_fc2, the code NormFormer trains with (probe only)")
class NormFormerFairseqBlock(NormFormerBlock):
    """normformer's block; `fairseq_init` is the difference."""


@register_layer("layernorm_fairseq_init", kind="placement", partner="layernorm", init_rule=fairseq_init,
                formula="pre-LN with fairseq's init: NormFormer's own baseline",
                source="facebookresearch/fairseq, as normformer_fairseq_init, without NormFormer's three operations "
                       "(probe only)")
class PreNormFairseqBlock(PreNormBlock):
    """The pre-norm block; `fairseq_init` is the difference."""
