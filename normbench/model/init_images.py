"""The training images a data-dependent init sees (Admin's profiling pass): the same on every seed, cheap.

`train/loop.py`'s `build_model` passes `init_images_for(layer, data)` to NormbenchViT; it is None (nothing read) for
every layer without a data-dependent init rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from normbench.layers import resolve_layer

if TYPE_CHECKING:
    from normbench.data import DataBundle

INIT_IMAGES = 64  # images in the profiling batch (admin.py's source line says 64: keep them equal)


def first_train_images(data: DataBundle, count: int = INIT_IMAGES) -> torch.Tensor:
    """The training split's first `count` images in stored order, normalized as training normalizes them and not
    augmented: the same batch on every seed and every rank (a sharded loader wraps the whole split's loader).

    A split that is not held as tensors (imagefolder, decoded by workers) gives instead the first `count` images of
    its first training batch of epoch 0, which follows the loader's seed.
    """
    loader = getattr(data.train, "loader", data.train)  # ShardedLoader -> the full split's loader
    images = getattr(loader, "images", None)
    if isinstance(images, torch.Tensor):
        return loader.normalize(images[:count])
    loader.set_epoch(0)
    x, _ = next(iter(loader))
    return x[:count]


def init_images_for(layer: str, data: DataBundle, count: int = INIT_IMAGES) -> torch.Tensor | None:
    """`first_train_images(data)` for a layer with a data-dependent init rule, else None."""
    return first_train_images(data, count) if resolve_layer(layer).data_init_rules else None
