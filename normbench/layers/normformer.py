"""NormFormer (Shleifer et al. 2021): pre-LN plus three operations, each initialised to leave the block as pre-LN's.

    x = x + post_attn_norm(HeadScaleMHA(norm1(x)))       HeadScaleMHA = Concat(γ_1 h_1, ..., γ_H h_H) W_O, γ = 1
    x = x + fc2(norm_mlp(act(fc1(norm2(x)))))

- HeadScale: a learnable scale per head (init 1) on each head's output before the output projection W_O, as the
  paper's equation; it sits in timm Attention's own slot for that place (`attn.norm`, between the heads and `proj`).
  fairseq's code (fairseq/modules/transformer_layer.py, `c_attn`) applies it after `out_proj` for speed, which the
  author says is not equivalent (fairseq issue #3973); this follows the paper.
- post-attention norm (fairseq `attn_ln`, `--scale-attn`) before the residual add; norm after the MLP's activation
  (fairseq `ffn_layernorm`, `--scale-fc`), in timm Mlp's `norm` slot (declared `mlp_norm="norm"`).
- The added norms are the combination's norm class (LayerNorm for `normformer`, as fairseq; RMSNorm for
  `rmsnorm+normformer`). The optional residual scaling (`--scale-resids`) is not part of the default NormFormer.
- `normformer_out_gamma` (not a source's): the post-attention norm's γ starts at 1/√(2·depth) instead of fairseq's
  1, the mechanism test `peri_ln_out_gamma` makes for Peri-LN (its FFN norm, inside the MLP, keeps γ = 1).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.blocks import ModuleFactory, PreNormBlock
from normbench.layers.peri_ln import scale_output_norms
from normbench.layers.registry import register_layer


class HeadScale(nn.Module):
    """A learnable scale per attention head on the concatenated head outputs (..., H·d_h), head h at channels
    [h·d_h, (h+1)·d_h) as timm's Attention lays them out."""

    def __init__(self, dim: int, num_heads: int, device=None, dtype=None) -> None:
        super().__init__()
        self.head_dim = dim // num_heads
        self.gamma = nn.Parameter(torch.empty(num_heads, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(no_decay(self.gamma))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., H·d_h) -> (..., H·d_h)
        return x * torch.repeat_interleave(self.gamma, self.head_dim)


@register_layer("normformer", kind="placement", partner="layernorm", mlp_norm="norm",
                formula="x + norm(HeadScaleMHA(norm(x))); x + fc2(norm(act(fc1(norm(x))))); per-head scale γ = 1 "
                        "before W_O",
                source="Shleifer, Weston & Ott 2021, NormFormer: Improved Transformer Pretraining with Extra "
                       "Normalization, Sec. 2; facebookresearch/fairseq fairseq/modules/transformer_layer.py "
                       "(attn_ln, c_attn, ffn_layernorm; its c_attn after out_proj, here before W_O as the paper)")
class NormFormerBlock(PreNormBlock):
    """Pre-norm with NormFormer's post-attention norm, HeadScale in `attn.norm` and a norm after the MLP's
    activation (`mlp.norm`; the model passes the combination's norm, and a block built alone uses `norm_layer`)."""

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: ModuleFactory,
                 mlp_norm_layer: ModuleFactory | None = None, **kwargs) -> None:
        super().__init__(dim, num_heads, depth=depth, norm_layer=norm_layer,
                         mlp_norm_layer=mlp_norm_layer or norm_layer, **kwargs)
        self.attn.norm = HeadScale(dim, num_heads)  # timm's slot between the heads and `proj` (its scale_norm)
        self.post_attn_norm = norm_layer(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.post_attn_norm(self.attn(self.norm1(x)))))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


@register_layer("normformer_out_gamma", kind="placement", partner="layernorm", mlp_norm="norm",
                init_rule=scale_output_norms,
                formula="normformer with the post-attention norm's γ initialised to 1/√(2·depth) (fairseq: 1)",
                source="no source: normbench's test of the collapse mechanism (docs/layers.md, 'Peri-LN and NormFormer "
                       "at init'); the block is Shleifer et al. 2021's NormFormer")
class NormFormerOutGammaBlock(NormFormerBlock):
    """normformer's block; `scale_output_norms` is the whole difference."""
