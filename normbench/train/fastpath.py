"""The fastest correct train step for a device and shape: each choice here was measured, and changes speed only.

What `train_cell` takes from here (`NORMBENCH_FASTPATH=0` turns all of it off, for before/after comparisons):

- **Fused AdamW** (`optimizer_kwargs`): one kernel over all parameters instead of ~10 small ops per parameter.
  Used wherever torch runs it, probed once per device type (CPU too in torch >= 2.4).
- **Attention path** (`use_fused_attention`, `set_attention_path`): timm's `Attention` either calls
  `F.scaled_dot_product_attention` (`fused_attn=True`, timm's default) or spells out softmax(q kᵀ) v. On CPU, torch's
  flash kernel has a per-call cost that short sequences do not pay back. `scripts/attention_path.py` (forward +
  backward of one Attention, medians of 7 interleaved blocks, 1 thread, machine loaded;
  results/attention-path-cpu-2.15.0.md): explicit/fused 0.91 at 17 tokens and 0.87 at 33, but 1.03-1.24 from 65
  tokens up; so the explicit form is used up to `CPU_EXPLICIT_MAX_TOKENS` = 33, the longest sequence measured
  faster. The gain is small and the machine was shared (an earlier, less loaded run gave 1.07 at 17 tokens), so
  re-measure on a quiet machine before leaning on it. On CUDA the fused kernels (flash / memory-efficient) are
  used; scripts/gpu-first-contact.sh measures that choice.
- **Loss** (`loss_function`): torch's `cross_entropy` with `label_smoothing` is one fused kernel and equals timm's
  `LabelSmoothingCrossEntropy`, `(1 - ε)·nll + ε·mean(-log p)`, which runs five.

Numerics: the same model and recipe; losses agree with the plain path to float rounding (tests/test_fastpath.py).
"""

from __future__ import annotations

import functools

import torch
from timm.layers import Attention
from timm.loss import LabelSmoothingCrossEntropy
from torch import nn

from normbench import settings

ENV_SWITCH = "NORMBENCH_FASTPATH"  # "0" -> the plain path (timm defaults, torch's unfused AdamW on CPU)
# Longest sequence for which the explicit attention is used on CPU: measured faster at 17 and 33 tokens, slower
# from 65 up (scripts/attention_path.py; the module docstring has the numbers)
CPU_EXPLICIT_MAX_TOKENS = 33


def enabled() -> bool:
    """Whether the fast path is on (default) or `NORMBENCH_FASTPATH=0` asks for the plain one."""
    return settings.current().fastpath


@functools.cache
def fused_adamw_supported(device_type: str) -> bool:
    """Whether `torch.optim.AdamW(fused=True)` steps on this device type; probed once on a one-element tensor,
    because the set of devices with a fused kernel changes between torch versions."""
    try:
        p = torch.zeros(1, device=device_type, requires_grad=True)
        p.grad = torch.ones_like(p)
        torch.optim.AdamW([p], lr=1e-3, fused=True).step()
    except (RuntimeError, ValueError):  # "fused=True requires all the params to be ... on a supported device"
        return False
    return True


def optimizer_kwargs(optimizer: str, device: torch.device) -> dict[str, bool]:
    """Extra keyword arguments for timm's `create_optimizer_v2`: `{"fused": True}` for AdamW where supported."""
    if optimizer.lower() == "adamw" and (enabled() or device.type == "cuda") and fused_adamw_supported(device.type):
        return {"fused": True}  # CUDA had fused AdamW before this module existed; the switch only governs CPU
    return {}


def use_fused_attention(device: torch.device, tokens: int) -> bool:
    """True for `F.scaled_dot_product_attention`, False for the explicit softmax(q kᵀ) v, for sequences of
    `tokens` on `device` (see the module docstring for the measurements)."""
    if not enabled() or device.type != "cpu":
        return True
    return tokens > CPU_EXPLICIT_MAX_TOKENS


def sequence_length(model: nn.Module) -> int:
    """Tokens per image of a timm-style ViT (NormbenchViT or timm's VisionTransformer): patches + prefix tokens."""
    return int(model.patch_embed.num_patches) + int(model.num_prefix_tokens)


def set_attention_path(model: nn.Module, device: torch.device, tokens: int | None = None) -> bool:
    """Set `fused_attn` on every timm `Attention` in `model` for sequences of `tokens` (default: the model's
    `sequence_length`); returns the choice. Must run before torch.compile traces the model, as dynamo reads the
    flag as a constant."""
    fused = use_fused_attention(device, sequence_length(model) if tokens is None else tokens)
    for module in model.modules():
        if isinstance(module, Attention):
            module.fused_attn = fused
    return fused


def loss_function(label_smoothing: float) -> nn.Module:
    """Cross-entropy with label smoothing ε for hard labels (default ε = 0: plain cross-entropy)."""
    if label_smoothing > 0 and not enabled():
        return LabelSmoothingCrossEntropy(label_smoothing)
    return nn.CrossEntropyLoss(label_smoothing=label_smoothing)
