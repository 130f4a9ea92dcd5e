"""Admin (Liu et al. 2020): post-LN with the skip scaled by ω, ω set from a profiling forward pass on training data.

`x = norm(ω ⊙ x + F(x))` per sublayer. As the official code (LiyuanLucasLiu/Transformer-Clinic
fairseq/fairseq/modules/transformer_layer.py, `--init-type adaptive-profiling`, then `adaptive`) does it:

- ω is a learnable per-channel vector (`attention_ratio_change`, `fc_ratio_change`: `nn.Parameter(torch.ones(C))`)
  filled with one profiled scalar per sublayer;
- the profiling pass runs the model once on a batch, sublayer by sublayer in order, with a running ratio r starting at
  1: sublayer i gets ω_i = r, then r = √(Var[ω_i · x_i] + Var[F_i(x_i)]), x_i its input, Var over every element
  (np.var), so ω_i² ≈ 1 + Σ_{j<i} Var[F_j]: the variance the earlier branches put on the stream.

`admin_init` is that pass, a data-dependent init rule (`data_init`): the model runs it on the images it is built with
(`init_images=`, the suite's first 64 training images in stored order, the same on every seed;
normbench/model/init_images.py) after timm's init. Differences from the official profiling: eval mode (no dropout or
drop-path, so the pass is deterministic and draws no random numbers; the source profiles in train mode, whose dropout
inflates Var[F_i] by 1/(1-p)), and it is part of building the model rather than a separate run writing a file.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import register_layer


@torch.no_grad()
def admin_init(model: nn.Module, images: torch.Tensor) -> None:
    """Fill every AdminBlock's ω from one forward pass of `images` (B, C, H, W) through `model` (a NormbenchViT)."""
    was_training = model.training
    model.eval()
    try:
        x = model._pos_embed(model.patch_embed(images))  # type: ignore[attr-defined, operator]
        ratio = torch.ones((), device=x.device, dtype=torch.float32)  # the official `encoder_ratio = 1.0`
        for block in model.blocks:  # type: ignore[attr-defined]
            x, ratio = block.profile(x, ratio)
    finally:
        model.train(was_training)


@register_layer("admin", kind="placement", partner="layernorm", data_init=admin_init,
                formula="x = norm(ω ⊙ x + F(x)); ω per channel, learnable, profiled on training images: ω₁ = 1, "
                        "ω_{i+1} = √(Var[ω_i x_i] + Var[F_i(x_i)]) over sublayers i",
                source="Liu et al. 2020, Understanding the Difficulty of Training Transformers (Admin); "
                       "LiyuanLucasLiu/Transformer-Clinic fairseq/fairseq/modules/transformer_layer.py "
                       "(adaptive-profiling); profiles the suite's first 64 training images, eval mode, at build")
class AdminBlock(PreNormBlock):
    """Post-LN with learnable skip weights `omega1`, `omega2` (C,), 1 until `admin_init` profiles them."""

    output_is_normalized = True

    def __init__(self, dim: int, num_heads: int, *, depth: int, **kwargs) -> None:
        super().__init__(dim, num_heads, depth=depth, **kwargs)
        self.omega1 = nn.Parameter(torch.empty(dim))
        self.omega2 = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.ones_(self.omega1)  # the profiling pass starts from ones, as the official `torch.ones(embed_dim)`
        nn.init.ones_(self.omega2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x * self.omega1 + self.drop_path1(self.ls1(self.attn(x))))
        x = self.norm2(x * self.omega2 + self.drop_path2(self.ls2(self.mlp(x))))
        return x

    @torch.no_grad()
    def profile(self, x: torch.Tensor, ratio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward's two sublayers with Transformer-Clinic's profiling: set ω from the running ratio, update it."""
        for omega, branch, norm in ((self.omega1, self._attn_branch, self.norm1),
                                    (self.omega2, self._mlp_branch, self.norm2)):
            omega.copy_(ratio.expand_as(omega))
            out = branch(x)
            skip = x * omega
            ratio = torch.sqrt(skip.float().var(correction=0) + out.float().var(correction=0))
            x = norm(skip + out)
        return x, ratio

    def _attn_branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.ls1(self.attn(x))

    def _mlp_branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.ls2(self.mlp(x))
