"""The deep-ViT template every layer plugs into, built from timm's parts and registered with timm.

    x = patch_embed(img) ⊕ cls_token + pos_embed        # (B, N, C), N = patches + 1
    x = block(x) for each of `depth` blocks              # the layer under test fills norm and gate slots
    logits = head(norm(x)[:, 0])                         # token pooling, as timm's ViT

For the configurations timm's VisionTransformer can express (layernorm or rmsnorm, with or without layerscale) the
state_dict matches timm's key for key, so a timm checkpoint loads with strict=True and gives the same logits.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal

import torch
from timm.layers import PatchEmbed, trunc_normal_
from timm.models import build_model_with_cfg
from timm.models._manipulate import named_apply
from timm.models.vision_transformer import init_weights_vit_timm
from torch import nn

from normbench.layers import LayerPlan, resolve_layer


def drop_path_rates(rate: float, depth: int, mode: Literal["linear", "uniform"] = "linear") -> list[float]:
    """Stochastic-depth rate per block: DeiT's linear ramp 0 -> rate, or CaiT's uniform rate."""
    if mode == "uniform":
        return [rate] * depth
    if mode == "linear":
        # timm's linspace(0, rate, depth): a lone block gets 0
        return [rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
    raise ValueError(f"drop_path_mode must be 'linear' or 'uniform', not {mode!r}")


class NormbenchViT(nn.Module):
    """A pre-norm ViT whose norm and gate slots, block placement and init rule come from one registry `layer`.

    Args:
        img_size: input side in pixels (default 224).
        patch_size: patch side (default 16).
        in_chans: input channels (default 3).
        num_classes: classifier outputs; 0 for features only (default 1000).
        embed_dim: channels C (default 768, as timm's ViT).
        depth: number of blocks (default 12).
        num_heads: attention heads (default 12).
        mlp_ratio: MLP hidden width over C (default 4).
        qkv_bias: bias on the qkv projection (default True).
        layer: registry name or `+` combination (default "layernorm").
        init_values: overrides a gate's init (LayerScale's ε; ReZero's 0) (default None: the paper's rule).
        class_token: prepend a class token (default True).
        global_pool: "token" (class token) or "avg" (mean of patch tokens, with fc_norm as timm) (default "token").
        drop_rate, proj_drop_rate, attn_drop_rate: dropout rates (default 0).
        drop_path_rate: stochastic depth (default 0); drop_path_mode "linear" (DeiT) or "uniform" (CaiT).
        norm_kwargs: extra arguments for the norm class (e.g. `{"alpha_init": 1.0}` for DyT).
    """

    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 768, depth: int = 12, num_heads: int = 12, mlp_ratio: float = 4.0,
                 qkv_bias: bool = True, layer: str = "layernorm", init_values: float | None = None,
                 class_token: bool = True, global_pool: Literal["token", "avg"] = "token", drop_rate: float = 0.0,
                 proj_drop_rate: float = 0.0, attn_drop_rate: float = 0.0, drop_path_rate: float = 0.0,
                 drop_path_mode: Literal["linear", "uniform"] = "linear",
                 norm_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        if global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool must be 'token' or 'avg', not {global_pool!r}")
        if global_pool == "token" and not class_token:
            raise ValueError("global_pool='token' needs class_token=True")
        self.plan: LayerPlan = resolve_layer(layer)
        self.layer, self.depth, self.num_classes, self.global_pool = layer, depth, num_classes, global_pool
        self.num_features = self.embed_dim = embed_dim
        norm_layer = partial(self.plan.norm.cls, **(norm_kwargs or {}))
        gate_cls = self.plan.gate.cls if self.plan.gate else None
        gate_layer = partial(gate_cls, depth=depth, init_values=init_values) if gate_cls else _identity

        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans,
                                      embed_dim=embed_dim)
        self.num_prefix_tokens = 1 if class_token else 0
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        num_tokens = self.patch_embed.num_patches + self.num_prefix_tokens
        self.pos_embed = nn.Parameter(torch.zeros(1, num_tokens, embed_dim))
        self.pos_drop = nn.Dropout(drop_rate)
        self.blocks = nn.Sequential(*[
            self.plan.block_cls(embed_dim, num_heads, depth=depth, norm_layer=norm_layer, gate_layer=gate_layer,
                                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, proj_drop=proj_drop_rate,
                                attn_drop=attn_drop_rate, drop_path=dpr)
            for dpr in drop_path_rates(drop_path_rate, depth, drop_path_mode)
        ])
        # timm: token pooling normalizes all tokens (`norm`); avg pooling normalizes the pooled vector (`fc_norm`).
        # Post-norm blocks already end in a norm: like BERT and DeepNet, no second one on top.
        final_norm = global_pool == "token" and not self.plan.block_cls.output_is_normalized
        self.norm = norm_layer(embed_dim) if final_norm else nn.Identity()
        self.fc_norm = norm_layer(embed_dim) if global_pool == "avg" else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()

        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's ViT init, then the layer's own init rule (Fixup, DeepNorm, T-Fixup), which must come last."""
        trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        named_apply(init_weights_vit_timm, self)
        for rule in self.plan.init_rules:
            rule(self)

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Embeddings, every norm and gate parameter, and any parameter tagged `_no_weight_decay` (timm's hook)."""
        slot_classes = tuple(s.cls for s in (self.plan.norm, self.plan.gate) if s is not None)
        names = {"pos_embed", "cls_token"}
        for module_name, module in self.named_modules():
            if isinstance(module, slot_classes):
                names |= {f"{module_name}.{n}" for n, _ in module.named_parameters()}
        names |= {n for n, p in self.named_parameters() if getattr(p, "_no_weight_decay", False)}
        return names

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:  # (B, C_in, H, W) -> (B, N, C)
        x = self.patch_embed(x)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.pos_drop(x + self.pos_embed)
        x = self.blocks(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:  # (B, N, C) -> (B, classes)
        x = x[:, 0] if self.global_pool == "token" else x[:, self.num_prefix_tokens:].mean(dim=1)
        x = self.head_drop(self.fc_norm(x))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _identity(dim: int) -> nn.Module:
    return nn.Identity()


def build_normbench_vit(pretrained: bool = False, **kwargs: Any) -> NormbenchViT:
    """Build through timm's builder so `pretrained_cfg` and friends behave as for any timm model."""
    if pretrained:
        raise ValueError("normbench_vit has no pretrained weights; load a checkpoint with load_state_dict")
    return build_model_with_cfg(NormbenchViT, "normbench_vit", pretrained=False, **kwargs)
