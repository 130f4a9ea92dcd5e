"""GPAS, Gradient-Preserving Activation Scaling (Chen et al. 2025, arXiv 2506.22049): pre-LN with each residual sum
scaled down in the forward pass while its gradient passes unscaled.

The official code (dandingsky/GPAS, peft_pretraining/modeling_llama.py, `GPASBlock` and `LlamaDecoderLayer` under
`norm_type == 'pre_gpas'`), per block:

    x ← x + F_attn(norm(x));   x ← x - SiLU(g) · sg(x)          sg: stop-gradient (`x.detach()`)
    x ← x + F_mlp(norm(x));    x ← x - SiLU(g) · sg(x)          the same g for both: one `gpas_block` per layer

Forward: x·(1 - SiLU(g)); backward: ∂/∂x is the identity, so every earlier block's gradient is preserved. g is one
learnable scalar per block, initialised to 0 (`gate_init_value = 0.0`): SiLU(0) = 0, so the block starts as pre-LN's,
forward and backward, and g still gets a gradient (SiLU'(0) = 1/2). Of the official Pre + GPAS runs only the 7B
one clips g's gradient (0.01; run_1b.sh: --clip_gate_grad 0.0); not here. The paper's placements beyond pre-LN
(Sandwich, LNS, DeepNorm, Mix-LN + GPAS) are not registered.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
import torch.nn.functional as F
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import register_layer

GATE_INIT = 0.0  # the official GPASBlock(gate_init_value=0.0)


class GPASScale(nn.Module):
    """x - SiLU(g)·sg(x): scaled forward, identity backward, one scalar g."""

    def __init__(self, device=None, dtype=None) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.empty((), device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(no_decay(self.gate), GATE_INIT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - F.silu(self.gate) * x.detach()


@register_layer("gpas", kind="placement", partner="layernorm",
                formula="x ← x + F(norm(x)), then x ← x - SiLU(g)·sg(x) after each sublayer; one scalar g per block, "
                        "g = 0 (= pre-LN at init)",
                source="Chen et al. 2025, GPAS: Accelerating Convergence of LLM Pretraining via Gradient-Preserving "
                       "Activation Scaling (arXiv 2506.22049); dandingsky/GPAS peft_pretraining/modeling_llama.py "
                       "GPASBlock, LlamaDecoderLayer norm_type 'pre_gpas'")
class GPASBlock(PreNormBlock):
    """Pre-norm with GPAS after each residual sum (`gpas`, shared by the two sublayers as in the official code)."""

    def __init__(self, dim: int, num_heads: int, **kwargs) -> None:
        super().__init__(dim, num_heads, **kwargs)
        self.gpas = GPASScale()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gpas(x + self.drop_path1(self.ls1(self.attn(self.norm1(x)))))
        x = self.gpas(x + self.drop_path2(self.ls2(self.mlp(self.norm2(x)))))
        return x
