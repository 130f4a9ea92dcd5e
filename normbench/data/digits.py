"""The 8x8 handwritten digits bundled with scikit-learn: 1797 real images, no download, CPU-sized."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from normbench.data.splits import TensorSplits

# Mean/std of the [0, 1] pixels of the fixed training split below (checked by tests/data/test_data_digits.py)
DIGITS_MEAN = (0.3054,)
DIGITS_STD = (0.3761,)
SPLIT_SEED = 0  # fixed, not the run seed: every cell of a benchmark sees the same split
VAL_FRACTION = 0.2


@lru_cache(maxsize=1)
def _digits_all() -> tuple[np.ndarray, np.ndarray]:
    # importing and parsing sklearn's bundled file takes ~1 s; do it once per process
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images.astype(np.float32) / 16.0)[:, None]  # 0..16 -> [0, 1], (N, 1, 8, 8)
    labels = bunch.target.astype(np.int64)
    images.setflags(write=False)  # cached and shared: fail loudly on in-place edits
    labels.setflags(write=False)
    return images, labels


@lru_cache(maxsize=1)
def digits_split_indices() -> tuple[np.ndarray, np.ndarray]:
    """Sorted indices into sklearn's 1797 digits of the fixed stratified split: (1437 train, 360 val)."""
    from sklearn.model_selection import train_test_split

    labels = _digits_all()[1]
    train_idx, val_idx = train_test_split(
        np.arange(len(labels)), test_size=VAL_FRACTION, stratify=labels, random_state=SPLIT_SEED
    )
    train_idx, val_idx = np.sort(train_idx), np.sort(val_idx)
    train_idx.setflags(write=False)
    val_idx.setflags(write=False)
    return train_idx, val_idx


def load_digits_splits() -> TensorSplits:
    """Digits as float32 (N, 1, 8, 8) in [0, 1], 10 classes, fixed stratified 80/20 split (1437 / 360)."""
    images, labels = _digits_all()
    train_idx, val_idx = digits_split_indices()
    # fancy indexing copies, so no caller can write into the cached arrays
    return TensorSplits(
        train_x=torch.from_numpy(images[train_idx]),
        train_y=torch.from_numpy(labels[train_idx]),
        val_x=torch.from_numpy(images[val_idx]),
        val_y=torch.from_numpy(labels[val_idx]),
        num_classes=10,
        mean=DIGITS_MEAN,
        std=DIGITS_STD,
    )
