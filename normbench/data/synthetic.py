"""A procedural image classification task: learnable, not trivial, identical on every machine and run."""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.data.splits import TensorSplits

DATA_SEED = 1234  # fixed, not the run seed: every cell of a benchmark sees the same images
TEMPLATE_GRID = 4  # templates are bicubic upsamplings of a 4x4 random grid, i.e. smooth, low frequency
SHARED_WEIGHT = 0.8  # a pattern common to all classes, so the class signal is only part of the image
NOISE_STD = 4.0  # per-pixel Gaussian noise, in template units (linear models reach ~60% at the defaults)
CONTRAST = (0.5, 1.5)  # per-sample contrast range
PIXEL_SCALE = 0.04  # maps template units to [0, 1] pixels around 0.5 (pixel std ~0.17, little clipping)
MAX_SHIFT = 0.25  # largest shift as a fraction of the side; shift-aware models can beat linear ones


def _shift(x: Tensor, dy: Tensor, dx: Tensor) -> Tensor:
    """Circularly shift each image of (N, C, H, W) by its own (dy, dx), both (N,) int64."""
    n, c, h, w = x.shape
    rows = (torch.arange(h) - dy[:, None]) % h  # (N, H)
    cols = (torch.arange(w) - dx[:, None]) % w  # (N, W)
    x = x.gather(2, rows[:, None, :, None].expand(n, c, h, w))
    return x.gather(3, cols[:, None, None, :].expand(n, c, h, w))


def _samples(templates: Tensor, shared: Tensor, count: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    num_classes, channels, size, _ = templates.shape
    labels = torch.arange(count) % num_classes  # balanced classes
    labels = labels[torch.randperm(count, generator=generator)]
    max_shift = max(1, round(size * MAX_SHIFT))
    dy, dx = torch.randint(-max_shift, max_shift + 1, (2, count), generator=generator)
    contrast = torch.empty(count, 1, 1, 1).uniform_(*CONTRAST, generator=generator)
    signal = _shift(templates[labels] + SHARED_WEIGHT * shared, dy, dx) * contrast
    noise = NOISE_STD * torch.randn(count, channels, size, size, generator=generator)
    images = (0.5 + PIXEL_SCALE * (signal + noise)).clamp_(0.0, 1.0)
    return images, labels


@lru_cache(maxsize=4)
def _synthetic_tensors(
    num_classes: int, size: int, channels: int, train_size: int, val_size: int, test_size: int
) -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(DATA_SEED)
    grid = torch.randn(num_classes + 1, channels, TEMPLATE_GRID, TEMPLATE_GRID, generator=generator)
    smooth = F.interpolate(grid, size=(size, size), mode="bicubic", align_corners=False)
    smooth = smooth / smooth.flatten(1).std(dim=1).view(-1, 1, 1, 1)  # unit energy per template
    templates, shared = smooth[:num_classes], smooth[num_classes]
    train_x, train_y = _samples(templates, shared, train_size, generator)
    val_x, val_y = _samples(templates, shared, val_size, generator)
    test_x, test_y = _samples(templates, shared, test_size, generator)  # drawn last: train and val are unchanged
    return train_x, train_y, val_x, val_y, test_x, test_y


def load_synthetic_splits(
    *, num_classes: int = 10, size: int = 16, channels: int = 3, train_size: int = 2048, val_size: int = 512,
    test_size: int = 512,
) -> TensorSplits:
    """Synthetic images: a smooth per-class template, randomly shifted (circularly, up to size/4 pixels),
    scaled in contrast and buried in Gaussian noise, on top of a pattern shared by all classes.

    Args:
        num_classes: Number of classes (default 10), balanced.
        size: Image side (default 16).
        channels: Image channels (default 3).
        train_size: Training samples (default 2048).
        val_size: Validation samples (default 512), for every choice (lr, tuned config).
        test_size: Test samples (default 512), for the reported score only.

    Returns:
        float32 (N, channels, size, size) images in [0, 1], with mean/std measured on the training split.
    """
    train_x, train_y, val_x, val_y, test_x, test_y = _synthetic_tensors(
        num_classes, size, channels, train_size, val_size, test_size)
    mean = tuple(train_x.mean(dim=(0, 2, 3)).tolist())
    std = tuple(train_x.std(dim=(0, 2, 3)).tolist())
    return TensorSplits(
        train_x=train_x.clone(),
        train_y=train_y.clone(),
        val_x=val_x.clone(),
        val_y=val_y.clone(),
        test_x=test_x.clone(),
        test_y=test_y.clone(),
        num_classes=num_classes,
        mean=mean,
        std=std,
    )
