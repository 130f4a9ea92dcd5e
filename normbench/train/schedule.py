"""Learning-rate schedule: linear warmup, then cosine to a floor. Stepped per optimizer step."""

from __future__ import annotations

import math


def warmup_cosine(step: int, *, total_steps: int, warmup_steps: int, lr: float, warmup_lr: float,
                  min_lr: float) -> float:
    """The learning rate at optimizer step `step` (0-based) of `total_steps`."""
    if step < warmup_steps:
        return warmup_lr + (lr - warmup_lr) * step / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * min(1.0, progress)))
