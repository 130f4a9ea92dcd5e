"""Whole-batch augmentation on the batch's own device: no per-sample loop and no host sync."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop(x: Tensor, padding: int, generator: torch.Generator) -> Tensor:
    """Zero-pad each image by `padding` pixels and crop it back to its size at a random offset.

    Args:
        x: Images (B, C, H, W), any dtype (uint8 stays uint8; zero is black before normalization).
        padding: Pixels of zero padding on every side; 0 returns `x` unchanged.
        generator: Generator on `x.device` that draws the offsets.

    Returns:
        Cropped images, same shape and dtype as `x`.
    """
    if padding <= 0:
        return x
    b, c, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    offsets = torch.randint(0, 2 * padding + 1, (2, b, 1), generator=generator, device=x.device)
    rows = offsets[0] + torch.arange(h, device=x.device)  # (B, H)
    cols = offsets[1] + torch.arange(w, device=x.device)  # (B, W)
    # two gathers (rows, then columns) pick a different window per sample
    x = padded.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * padding))
    return x.gather(3, cols[:, None, None, :].expand(b, c, h, w))


def random_flip(x: Tensor, generator: torch.Generator, p: float = 0.5) -> Tensor:
    """Mirror each image left-right with probability `p` (default 0.5). x: (B, C, H, W) -> same shape."""
    mask = torch.rand((x.shape[0], 1, 1, 1), generator=generator, device=x.device) < p
    return torch.where(mask, x.flip(-1), x)


def resize_images(x: Tensor, size: int, chunk: int = 2048) -> Tensor:
    """Bilinear resize (antialiased when shrinking) of (N, C, H, W) images to (N, C, size, size), keeping dtype.

    uint8 input is rounded back to uint8 so large sets stay small; work is done `chunk` images at a time
    (default 2048) to bound the float32 peak.
    """
    if x.shape[-2:] == (size, size):
        return x
    antialias = size < max(x.shape[-2:])
    out = torch.empty((*x.shape[:2], size, size), dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[0], chunk):
        part = x[start : start + chunk].float()
        part = F.interpolate(part, size=(size, size), mode="bilinear", align_corners=False, antialias=antialias)
        if x.dtype == torch.uint8:
            part = part.round_().clamp_(0, 255)
        out[start : start + chunk] = part.to(x.dtype)
    return out
