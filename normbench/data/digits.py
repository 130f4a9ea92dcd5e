"""The 8x8 handwritten digits bundled with scikit-learn: 1797 real images, no download, CPU-sized."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from normbench.data.splits import TensorSplits, splits_from_indices, three_way

# Mean/std of the [0, 1] pixels of the fixed training split below (checked by tests/data/test_data_digits.py)
DIGITS_MEAN = (0.3047,)
DIGITS_STD = (0.3757,)
VAL_SIZE = 360  # 1797 -> 1077 train / 360 val / 360 test, stratified
TEST_SIZE = 360


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
def digits_split_indices() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted indices into sklearn's 1797 digits of the fixed stratified split: (1077 train, 360 val, 360 test)."""
    return three_way(_digits_all()[1], VAL_SIZE, TEST_SIZE)


def load_digits_splits() -> TensorSplits:
    """Digits as float32 (N, 1, 8, 8) in [0, 1], 10 classes, fixed stratified split (1077 / 360 / 360)."""
    images, labels = _digits_all()
    return splits_from_indices(images, labels, digits_split_indices(), num_classes=10, mean=DIGITS_MEAN, std=DIGITS_STD)
