"""In-memory train/val tensors, as the device-resident data sets load them."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class TensorSplits:
    """A whole data set as CPU tensors.

    Attributes:
        train_x: (N_train, C, H, W) uint8 in [0, 255] or float32 in [0, 1].
        train_y: (N_train,) int64 labels.
        val_x: (N_val, C, H, W), same dtype as `train_x`.
        val_y: (N_val,) int64 labels.
        num_classes: Number of labels.
        mean: Per-channel mean of [0, 1] pixel values.
        std: Per-channel standard deviation of [0, 1] pixel values.
    """

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
