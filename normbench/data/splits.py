"""In-memory train/val/test tensors, as the device-resident data sets load them, and the fixed split rule.

The protocol (docs/protocol.md): training fits on train, every choice (the lr, a tuned config) is made on val,
and the reported score is test top-1 at the final epoch. Splits never depend on the run seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

SPLIT_SEED = 0  # fixed, not the run seed: every cell of a benchmark sees the same split


@dataclass
class TensorSplits:
    """A whole data set as CPU tensors.

    Attributes:
        train_x: (N_train, C, H, W) uint8 in [0, 255] or float32 in [0, 1].
        train_y: (N_train,) int64 labels.
        val_x: (N_val, C, H, W), same dtype as `train_x`; used for every choice (lr, tuned config).
        val_y: (N_val,) int64 labels.
        test_x: (N_test, C, H, W), same dtype as `train_x`; used only for the reported score.
        test_y: (N_test,) int64 labels.
        num_classes: Number of labels.
        mean: Per-channel mean of [0, 1] pixel values.
        std: Per-channel standard deviation of [0, 1] pixel values.
    """

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


def stratified_holdout(labels: np.ndarray, size: int, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Split indices 0..N-1 into (kept, held out) with `size` held out, class proportions kept.

    Deterministic for a given (labels, size, seed). Falls back to a plain random split when some class has fewer
    than two samples or `size` is smaller than the number of classes (tiny test sets), where stratifying is
    impossible.

    Returns:
        Two sorted int64 index arrays, (N - size,) and (size,).
    """
    from sklearn.model_selection import train_test_split

    n = len(labels)
    if not 0 < size < n:
        raise ValueError(f"cannot hold out {size} of {n} samples")
    counts = np.bincount(labels)
    classes = int((counts > 0).sum())
    can_stratify = counts[counts > 0].min() >= 2 and classes <= size <= n - classes
    stratify = labels if can_stratify else None
    kept, held = train_test_split(np.arange(n), test_size=size, stratify=stratify, random_state=seed)
    return np.sort(kept), np.sort(held)


def three_way(labels: np.ndarray, val_size: int, test_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixed stratified (train, val, test) indices: test held out first, then val from the rest. Read-only."""
    rest, test = stratified_holdout(labels, test_size)
    train, val = stratified_holdout(labels[rest], val_size)
    parts = rest[train], rest[val], test
    for part in parts:
        part.setflags(write=False)  # cached by the bundled data sets and shared: fail loudly on in-place edits
    return parts


def splits_from_indices(images: np.ndarray, labels: np.ndarray, indices: tuple[np.ndarray, np.ndarray, np.ndarray],
                        *, num_classes: int, mean: tuple[float, ...], std: tuple[float, ...]) -> TensorSplits:
    """A bundled in-memory data set cut by its fixed (train, val, test) indices. Fancy indexing copies, so no
    caller can write into the cached arrays."""
    (train_x, val_x, test_x), (train_y, val_y, test_y) = (
        [torch.from_numpy(a[i]) for i in indices] for a in (images, labels))
    return TensorSplits(train_x=train_x, train_y=train_y, val_x=val_x, val_y=val_y, test_x=test_x, test_y=test_y,
                        num_classes=num_classes, mean=mean, std=std)
