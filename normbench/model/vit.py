"""The deep-ViT template every layer plugs into, built from timm's parts and registered with timm.

    x = patch_embed(img) ⊕ cls_token + pos_embed        # (B, N, C), N = patches + 1
    x = block(x) for each of `depth` blocks              # the layer under test fills norm and gate slots
    logits = head(norm(x)[:, 0])                         # token pooling, as timm's ViT

A block family (hyper-connections, mHC, nGPT) brings its own block class, and may bring what runs on the tokens
before the first block (`expand`: n stream copies; nGPT's projection onto the sphere), after the last (`merge`: the
streams summed) and its own classifier (`head`); without one, `expand` and `merge` are `nn.Identity()`.

For the configurations timm's VisionTransformer can express (layernorm or rmsnorm, with or without layerscale) the
state_dict matches timm's key for key, so a timm checkpoint loads with strict=True and gives the same logits. The
model offers timm's ViT interface: `reset_classifier`, `forward_intermediates`, `features_only=True`,
`set_grad_checkpointing`, `dynamic_img_size`, `pretrained=True` from a local file.

No `from __future__ import annotations` in this file: torch.fx copies `forward`'s annotations into the code it
generates, and TorchScript cannot resolve them there when they are strings (`Unknown type name '_torch_Tensor_'`).
"""

from functools import partial
from typing import Any, Final, Literal

import torch
from timm.layers import PatchEmbed, global_pool_nlc, resample_abs_pos_embed, trunc_normal_
from timm.models import build_model_with_cfg, checkpoint_seq
from timm.models._features import feature_take_indices
from timm.models._manipulate import checkpoint, named_apply
from timm.models.vision_transformer import checkpoint_filter_fn, init_weights_vit_timm
from torch import nn

from normbench.layers import LayerError, LayerPlan, PreNormBlock, resolve_layer

GLOBAL_POOLS = ("", "token", "avg", "avgmax", "max")  # timm's ViT pools, less its attention pools (map, prr)


def drop_path_rates(rate: float, depth: int, mode: Literal["linear", "uniform"] = "linear") -> list[float]:
    """Stochastic-depth rate per block: DeiT's linear ramp 0 -> rate, or CaiT's uniform rate."""
    if mode == "uniform":
        return [rate] * depth
    if mode == "linear":
        # timm's linspace(0, rate, depth): a lone block gets 0
        return [rate * i / (depth - 1) if depth > 1 else 0.0 for i in range(depth)]
    raise ValueError(f"drop_path_mode must be 'linear' or 'uniform', not {mode!r}")


def _check_pool(global_pool: str, class_token: bool) -> None:
    if global_pool not in GLOBAL_POOLS:
        raise ValueError(f"global_pool must be one of {', '.join(map(repr, GLOBAL_POOLS))}, not {global_pool!r} "
                         "(timm's attention pools 'map' and 'prr' are not offered)")
    if global_pool == "token" and not class_token:
        raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a class token")


class NormbenchViT(nn.Module):
    """A pre-norm ViT whose norm and gate slots, block placement and init rule come from one registry `layer`.

    Args:
        img_size: input side in pixels, or (H, W) (default 224).
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
        global_pool: "token" (class token), "avg", "max", "avgmax" (over patch tokens, with fc_norm as timm) or ""
            (no pooling: the head sees every token) (default "token").
        fc_norm: norm after pooling instead of before; None: on for avg/max/avgmax, as timm (default None).
        dynamic_img_size: accept any input size, resampling pos_embed to the patch grid, as timm (default False).
        dynamic_img_pad: pad inputs up to a multiple of the patch size (default False).
        drop_rate, proj_drop_rate, attn_drop_rate: dropout rates (default 0).
        drop_path_rate: stochastic depth (default 0); drop_path_mode "linear" (DeiT) or "uniform" (CaiT).
        norm_kwargs: extra arguments for the norm class (e.g. `{"alpha_init": 1.0}` for DyT).
        grad_checkpointing: recompute each block's activations in the backward pass instead of storing them
            (timm's `checkpoint_seq`): same loss and gradients, less memory, one more pass of the blocks
            (default False).
        init_images: training images (B, C_in, H, W) for a layer whose init depends on data (Admin profiles its ω
            on them); required by such a layer, ignored by the others. Kept on the model (`init_images`, not in the
            state_dict) so that `init_weights()` can re-run the init after a meta-device build (default None).
        block_kwargs: extra arguments for every block, e.g. `{"post_ln_ratio": 0.25}` for Mix-LN or
            `{"expansion_rate": 2}` for hyper-connections (a family's expand and merge steps get them too); checked by
            `LayerPlan.check_block_kwargs` (default None).
    """

    dynamic_img_size: Final[bool]

    def __init__(self, img_size: int | tuple[int, int] = 224, patch_size: int = 16, in_chans: int = 3,
                 num_classes: int = 1000, embed_dim: int = 768, depth: int = 12, num_heads: int = 12,
                 mlp_ratio: float = 4.0, qkv_bias: bool = True, layer: str = "layernorm",
                 init_values: float | None = None, class_token: bool = True, global_pool: str = "token",
                 fc_norm: bool | None = None, dynamic_img_size: bool = False, dynamic_img_pad: bool = False,
                 drop_rate: float = 0.0, proj_drop_rate: float = 0.0, attn_drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, drop_path_mode: Literal["linear", "uniform"] = "linear",
                 norm_kwargs: dict[str, Any] | None = None, grad_checkpointing: bool = False,
                 init_images: torch.Tensor | None = None, block_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        _check_pool(global_pool, class_token)
        self.plan: LayerPlan = resolve_layer(layer)
        self.init_images = init_images
        self.layer, self.depth, self.num_classes, self.global_pool = layer, depth, num_classes, global_pool
        self.in_chans = in_chans
        self.num_features = self.head_hidden_size = self.embed_dim = embed_dim
        self.has_class_token = class_token
        self.num_prefix_tokens = 1 if class_token else 0
        self.dynamic_img_size = dynamic_img_size
        self.grad_checkpointing = False
        norm_layer = partial(self.plan.norm.cls, **(norm_kwargs or {}))
        gate_cls = self.plan.gate.cls if self.plan.gate else None
        gate_layer = partial(gate_cls, depth=depth, init_values=init_values) if gate_cls else _identity
        # modules a method needs beyond the norm and gate slots are built here, never added by its init rule;
        # each is passed only when used, so plugin blocks need not take it. The combination's own norm class comes
        # with the suite's norm_kwargs.
        block_extras: dict[str, Any] = dict(block_kwargs or {})
        self.plan.check_block_kwargs(block_extras)
        family = self.plan.family.family if self.plan.family else None
        for key, cls in (("mlp_norm_layer", self.plan.mlp_norm_layer), ("qk_norm_layer", self.plan.qk_norm_layer)):
            if cls is not None:
                block_extras[key] = norm_layer if cls is self.plan.norm.cls else cls
        if self.plan.attn_kwargs:  # what the entries add to the attention (gated attention's gate)
            block_extras["attn_kwargs"] = self.plan.attn_kwargs
        block_cls = self.plan.block_cls
        # the block's place in the stack, for placements whose constants depend on it (LNS, Mix-LN)
        takes_index = issubclass(block_cls, PreNormBlock) or family is not None  # families take it too
        index_of = (lambda i: {"block_index": i}) if takes_index else (lambda i: {})

        # dynamic size: timm's PatchEmbed keeps the (B, H, W, C) grid so that pos_embed can be resampled to it
        embed_args = dict(strict_img_size=False, output_fmt="NHWC") if dynamic_img_size else {}
        self.patch_embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans,
                                      embed_dim=embed_dim, dynamic_img_pad=dynamic_img_pad, **embed_args)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        num_tokens = self.patch_embed.num_patches + self.num_prefix_tokens
        self.pos_embed = nn.Parameter(torch.zeros(1, num_tokens, embed_dim))
        self.pos_drop = nn.Dropout(drop_rate)
        stream_args = dict(depth=depth, **(block_kwargs or {}))
        self.expand = family.expand(embed_dim, **stream_args) if family and family.expand else nn.Identity()
        self.blocks = nn.Sequential(*[
            block_cls(embed_dim, num_heads, depth=depth, norm_layer=norm_layer, gate_layer=gate_layer,
                      mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, proj_drop=proj_drop_rate, attn_drop=attn_drop_rate,
                      drop_path=dpr, **index_of(i), **block_extras)
            for i, dpr in enumerate(drop_path_rates(drop_path_rate, depth, drop_path_mode))
        ])
        self.merge = family.merge(embed_dim, **stream_args) if family and family.merge else nn.Identity()
        reduction = self.patch_embed.feat_ratio()
        self.feature_info = [dict(module=f"blocks.{i}", num_chs=embed_dim, reduction=reduction) for i in range(depth)]
        # timm: token pooling normalizes all tokens (`norm`); avg pooling normalizes the pooled vector (`fc_norm`).
        # Post-norm blocks already end in a norm: like BERT and DeepNet, no second one on top.
        use_fc_norm = global_pool in ("avg", "avgmax", "max") if fc_norm is None else fc_norm
        final_norm = not use_fc_norm and not block_cls.output_is_normalized
        self.norm = norm_layer(embed_dim) if final_norm else nn.Identity()
        self.fc_norm = norm_layer(embed_dim) if use_fc_norm else nn.Identity()
        self.head_drop = nn.Dropout(drop_rate)
        self.head_cls = family.head if family and family.head else nn.Linear
        self.head = self.head_cls(embed_dim, num_classes) if num_classes > 0 else nn.Identity()

        self.init_weights()
        self.set_grad_checkpointing(grad_checkpointing)

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's ViT init, then the layer's own init rule (Fixup, DeepNorm, T-Fixup), which must come last, then
        its data-dependent init on `init_images` (Admin), which measures the model as initialised."""
        trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        named_apply(init_weights_vit_timm, self)
        for rule in self.plan.init_rules:
            rule(self)
        data_rules = self.plan.data_init_rules
        if data_rules and self.init_images is None:
            raise LayerError(f"layer `{self.layer}` sets its init from a forward pass on training images and was "
                             "given none: pass init_images=<a (B, C, H, W) batch of training images> to NormbenchViT "
                             "or timm.create_model, or train it from a suite (the loop passes the first training "
                             "images)")
        for data_rule in data_rules:
            data_rule(self, self.init_images.to(self.pos_embed))  # type: ignore[union-attr]

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Embeddings, every norm and gate parameter (q/k norms too), and any parameter tagged `_no_weight_decay`
        (timm's hook)."""
        slot_classes = tuple(s.cls for s in self.plan.specs if s.kind in ("norm", "gate", "modifier"))
        names = {"pos_embed", "cls_token"}
        for module_name, module in self.named_modules():
            if isinstance(module, slot_classes):
                names |= {f"{module_name}.{n}" for n, _ in module.named_parameters()}
        names |= {n for n, p in self.named_parameters() if getattr(p, "_no_weight_decay", False)}
        return names

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups for timm's layer-wise lr decay: the stem, then one group per block (as timm's ViT)."""
        return dict(stem=r"^cls_token|pos_embed|patch_embed", blocks=[(r"^blocks\.(\d+)", None), (r"^norm", (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute block activations in the backward pass (timm's `checkpoint_seq`), trading compute for memory."""
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A fresh head with `num_classes` outputs (0: none, the model returns features) and, if given, a new pool.

        As timm's ViT: the norm placement (`norm` or `fc_norm`) chosen at construction stays.
        """
        if global_pool is not None:
            _check_pool(global_pool, self.has_class_token)
            self.global_pool = global_pool
        self.num_classes = num_classes
        dd = dict(device=self.pos_embed.device, dtype=self.pos_embed.dtype)
        self.head = self.head_cls(self.embed_dim, num_classes, **dd) if num_classes > 0 else nn.Identity()
        self.head.train(self.training)

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:  # patch tokens -> (B, N, C) with prefix and position
        if self.dynamic_img_size:
            B, H, W, C = x.shape
            pos_embed = resample_abs_pos_embed(self.pos_embed, new_size=(H, W), old_size=self.patch_embed.grid_size,
                                               num_prefix_tokens=self.num_prefix_tokens)
            x = x.view(B, -1, C)
        else:
            pos_embed = self.pos_embed
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.pos_drop(x + pos_embed)

    def forward_intermediates(
            self,
            x: torch.Tensor,
            indices: int | list[int] | None = None,
            return_prefix_tokens: bool = False,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = "NCHW",
            intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Block outputs along the way, as timm's ViT returns them.

        Args:
            x: images (B, C_in, H, W).
            indices: the last n blocks if an int, these blocks if a list (negative from the end), all if None.
            return_prefix_tokens: pair each intermediate with its class token (B, 1, C).
            norm: apply the final norm to each intermediate (default False).
            stop_early: skip the blocks after the last one asked for.
            output_fmt: "NCHW" (B, C, H/p, W/p) or "NLC" (B, patches, C).
            intermediates_only: return only the list.

        Returns:
            The intermediates, or (forward_features(x), intermediates).
        """
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', not {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        intermediates = []
        B, _, height, width = x.shape
        x = self.expand(self._pos_embed(self.patch_embed(x)))
        blocks = self.blocks if torch.jit.is_scripting() or not stop_early else self.blocks[:max_index + 1]
        for i, block in enumerate(blocks):
            x = checkpoint(block, x) if self.grad_checkpointing and not torch.jit.is_scripting() else block(x)
            if i in take_indices:  # a family's streams merged first, as before the final norm
                intermediates.append(self.norm(self.merge(x)) if norm else self.merge(x))

        prefix_tokens = [y[:, :self.num_prefix_tokens] for y in intermediates]
        intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == "NCHW":
            H, W = self.patch_embed.dynamic_feat_size((height, width))
            intermediates = [y.reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates]
        if return_prefix_tokens and self.num_prefix_tokens:
            intermediates = list(zip(intermediates, prefix_tokens, strict=True))
        if intermediates_only:
            return intermediates
        return self.norm(self.merge(x)), intermediates

    def prune_intermediate_layers(self, indices: int | list[int] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """Drop the blocks after the last of `indices` (and the final norm, the head), as timm's ViT.

        Returns:
            The absolute indices kept, for `forward_intermediates`.
        """
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:max_index + 1]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm = nn.Identity()
            self.reset_classifier(0, "")
        return take_indices

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:  # (B, C_in, H, W) -> (B, N, C)
        x = self.expand(self._pos_embed(self.patch_embed(x)))
        if self.grad_checkpointing and not torch.jit.is_scripting():
            x = checkpoint_seq(self.blocks, x)
        else:
            x = self.blocks(x)
        return self.norm(self.merge(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:  # (B, N, C) -> (B, classes)
        x = global_pool_nlc(x, pool_type=self.global_pool, num_prefix_tokens=self.num_prefix_tokens)
        x = self.head_drop(self.fc_norm(x))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _identity(dim: int) -> nn.Module:
    return nn.Identity()


def filter_checkpoint(state_dict: dict[str, torch.Tensor], model: NormbenchViT) -> dict[str, torch.Tensor]:
    """timm's ViT checkpoint filter; for a block family, a LayerError (one line, exit 2) when the weights lack the
    family's own keys: a plain ViT's (or another family's) weights were trained in another residual stream, so no
    adaptation makes them a `hc` or `ngpt` model, and timm's strict load would fail with every key listed."""
    state_dict = checkpoint_filter_fn(state_dict, model)
    if model.plan.family is not None:
        missing = [k for k in model.state_dict() if k not in state_dict]
        if missing:
            raise LayerError(f"layer `{model.layer}`: the weights have no `{missing[0]}` ({len(missing)} of the "
                             f"model's keys are missing): they are not a `{model.layer}` model's, and a block family "
                             f"cannot load another residual stream's weights; load a file saved from a "
                             f"`{model.layer}` model of the same shape")
    return state_dict


def classifier_names(layer: str) -> str | tuple[str, ...]:
    """timm's cfg `classifier` for `layer`: each module of the head holding a `weight` (`head`; nGPT's head also
    `head.logit_scale`). timm drops `<name>.weight` and `.bias` of each when loading weights for other classes, and
    its model tests check each names a weight; the head is built on the meta device to read them (no memory)."""
    family = resolve_layer(layer).family
    if family is None or family.family is None or family.family.head is None:
        return "head"
    head = family.family.head(8, 2, device="meta")
    names = tuple(f"head.{n}".rstrip(".") for n, m in head.named_modules()
                  if "weight" in dict(m.named_parameters(recurse=False)))
    return names[0] if len(names) == 1 else names


def build_normbench_vit(pretrained: bool = False, **kwargs: Any) -> NormbenchViT:
    """Build through timm's builder, as timm's `_create_vision_transformer`: `pretrained_cfg`, `features_only`
    (timm's getter on `forward_intermediates`), and `pretrained=True` from a local file
    (`pretrained_cfg_overlay=dict(file=PATH)`) with timm's adaptation of `in_chans` and `num_classes`."""
    if pretrained:  # a normbench weights file (train.keep_weights) says which model it holds
        from normbench.model.weights_file import with_file_defaults

        kwargs = with_file_defaults(kwargs)
    overlay = kwargs.get("pretrained_cfg_overlay") or {}
    # every head parameter named, so timm drops the whole head when the classes differ (nGPT's logit scale too)
    kwargs["pretrained_cfg_overlay"] = {"classifier": classifier_names(kwargs.get("layer", "layernorm")), **overlay}
    has_source = kwargs.get("pretrained_cfg") or any(overlay.get(k) for k in ("file", "state_dict", "url", "hf_hub_id"))
    if pretrained and not has_source:
        raise ValueError("normbench_vit has no published pretrained weights; load your own checkpoint with "
                         "pretrained=True, pretrained_cfg_overlay=dict(file=PATH) (timm's train.py --pretrained-path)")
    out_indices = kwargs.pop("out_indices", min(3, kwargs.get("depth", 12)))
    return build_model_with_cfg(NormbenchViT, "normbench_vit", pretrained=pretrained,
                                pretrained_filter_fn=filter_checkpoint,
                                feature_cfg=dict(out_indices=out_indices, feature_cls="getter"), **kwargs)
