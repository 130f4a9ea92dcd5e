"""The `normbench_vit` entrypoint in timm's model registry: `timm.create_model("normbench_vit", layer=...)`."""

from __future__ import annotations

from typing import Any

from timm.models import generate_default_cfgs, register_model

# No weights are published; the cfg tells timm's data helpers the input the template expects by default, and
# describes a checkpoint given by `pretrained_cfg_overlay=dict(file=...)` unless the overlay says otherwise (its
# channels and classes are what timm adapts `in_chans` and `num_classes` from). As timm's ViTs, the input size is
# fixed (the learned pos_embed has one grid) unless the model is built with `dynamic_img_size=True`.
default_cfgs = generate_default_cfgs({
    "normbench_vit": {
        "url": "", "num_classes": 1000, "input_size": (3, 224, 224), "pool_size": None, "crop_pct": 0.9,
        "interpolation": "bicubic", "fixed_input_size": True, "mean": (0.485, 0.456, 0.406),
        "std": (0.229, 0.224, 0.225), "first_conv": "patch_embed.proj", "classifier": "head",
    },
})


@register_model
def normbench_vit(pretrained: bool = False, **kwargs: Any):  # type: ignore[no-untyped-def]
    """The deep-ViT template with any registered layer: `layer="layerscale"`, `"learnable_scaler+layerscale"`."""
    from normbench.model.vit import build_normbench_vit

    return build_normbench_vit(pretrained=pretrained, **kwargs)
