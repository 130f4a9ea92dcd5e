"""Parameter groups for the optimizer: weight decay as timm groups it, plus the per-parameter lr multipliers and
weight-decay overrides that layers declare as tags.

Tags a layer may set on a parameter (read here, nowhere else):
    `_no_weight_decay = True`     no weight decay (norm and gate parameters; also listed by `model.no_weight_decay()`)
    `_force_weight_decay = True`  weight decay even where the rule above would skip it (`fixup_official`)
    `_force_weight_decay = False` no weight decay even where the rule would apply it (`ngpt`: the paper trains without)
    `_lr_scale = s`               trains at s x the scheduled lr (`fixup_official`'s scalars: 0.1)
    `_no_warmup = True`           its group skips the lr warmup (`ngpt`), key `warmup: False` read by the loop
    `_muon = True | False`        on Muon, or on AdamW, under `train.optimizer: muon` whatever the rule below says
    `_muon_blocks = b`            Muon orthogonalises its b row blocks one by one (default: 3 for a fused qkv)

Under Muon (`muon=True`, train/muon.py) each group also says which optimizer trains it (`use_muon`, timm's Muon key):
Muon takes the blocks' hidden matrices, the weights of the `nn.Linear` layers inside `model.blocks` (attn.qkv,
attn.proj, mlp.fc1, mlp.fc2); AdamW takes the rest: the patch and position embeddings, the class token, the head,
every norm, gain, gate and bias, and the block families' connection coefficients (docs/layers.md's table). A fused
qkv weight is three matrices to Muon (`muon_blocks` 3, train/muon.py): Wq, Wk and Wv, as the references that keep them
apart train them.
"""

from __future__ import annotations

from typing import Any

from torch import nn

BLOCKS = "blocks."  # NormbenchViT's blocks: the hidden layers, between the embedding and the head
FUSED_QKV = ".attn.qkv.weight"  # timm's Attention stacks Wq, Wk, Wv by rows in one (3 C, C) weight


def decays(name: str, p: nn.Parameter, no_weight_decay: set[str]) -> bool:
    """timm's rule (`param_groups_weight_decay`): no decay for 1-D parameters, biases and the model's
    `no_weight_decay()` names; a `_force_weight_decay` tag (True or False) overrides it."""
    forced = getattr(p, "_force_weight_decay", None)
    if forced is not None:
        return bool(forced)
    return not (p.ndim <= 1 or name.endswith(".bias") or name in no_weight_decay
                or getattr(p, "_no_weight_decay", False))


def hidden_matrices(model: nn.Module) -> set[str]:
    """The names of the parameters Muon trains: each `nn.Linear` weight inside the blocks, where the token's features
    are mapped to features (the references' hidden 2-D weights), unless a `_muon` tag says otherwise; a parameter
    tagged `_muon = True` joins them wherever it is."""
    linear = {f"{name}.weight" for name, module in model.named_modules()
              if name.startswith(BLOCKS) and isinstance(module, nn.Linear)}
    return {name for name, p in model.named_parameters()
            if getattr(p, "_muon", name in linear and p.ndim == 2)}


def muon_blocks(name: str, p: nn.Parameter) -> int:
    """How many row blocks Muon orthogonalises one by one in hidden matrix `name`: 3 for a fused qkv (q, k, v), else
    1; a `_muon_blocks` tag says otherwise."""
    return int(getattr(p, "_muon_blocks", 3 if name.endswith(FUSED_QKV) else 1))


def param_groups(model: nn.Module, lr: float, weight_decay: float, muon: bool = False) -> list[dict[str, Any]]:
    """The trainable parameters of `model` in groups of equal (weight decay, lr multiplier[, optimizer]).

    Each group carries `lr_scale` (timm's key for a per-group lr multiplier; the training loop sets
    `lr = scheduled lr x lr_scale`), `lr` (= `lr` x `lr_scale`) and `weight_decay` (`weight_decay` or 0). Without tags
    this is exactly timm's `create_optimizer_v2(model, ...)` grouping: two groups, decay and no decay.

    Args:
        model: the model; its `no_weight_decay()` (timm's hook), if any, names parameters without decay.
        lr: the peak learning rate.
        weight_decay: the decoupled weight decay of decayed parameters.
        muon: split the groups by optimizer too, each with `use_muon` (True: Muon, False: AdamW), and Muon's groups by
            `muon_blocks` (train/muon.py).
    """
    no_wd = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    on_muon = hidden_matrices(model) if muon else set()
    groups: dict[tuple[bool, float, bool, bool, int], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = decays(name, p, no_wd)
        scale = float(getattr(p, "_lr_scale", 1.0))
        warmup = not getattr(p, "_no_warmup", False)
        matrix = name in on_muon
        blocks = muon_blocks(name, p) if matrix else 1
        group = groups.setdefault((decay, scale, warmup, matrix, blocks), {
            "params": [], "weight_decay": weight_decay if decay else 0.0, "lr_scale": scale, "lr": lr * scale,
            **({} if warmup else {"warmup": False}), **({"use_muon": matrix} if muon else {}),
            **({"muon_blocks": blocks} if blocks > 1 else {})})
        group["params"].append(p)
    return list(groups.values())
