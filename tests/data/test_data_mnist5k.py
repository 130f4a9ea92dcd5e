from __future__ import annotations

import numpy as np
import torch

from normbench.data import DataConfig, build_data
from normbench.data.mnist5k import MNIST5K_MEAN, MNIST5K_STD, load_mnist5k_splits, mnist5k_split_indices
from tests.data.test_data_digits import split_digest


def test_fixed_stratified_three_way_split() -> None:
    train_idx, val_idx, test_idx = mnist5k_split_indices()
    assert (len(train_idx), len(val_idx), len(test_idx)) == (3000, 1000, 1000)
    assert len(np.union1d(np.union1d(train_idx, val_idx), test_idx)) == 5000  # disjoint and complete
    assert split_digest((train_idx, val_idx, test_idx)) == "775937292fa2e59a"  # fixed: as the published results'
    splits = load_mnist5k_splits()
    for labels in (splits.train_y, splits.val_y, splits.test_y):
        counts = np.bincount(labels.numpy(), minlength=10)
        assert counts.min() == counts.max() == len(labels) // 10  # 500 per class in the wheel: exactly balanced


def test_real_images_and_normalization_constants() -> None:
    splits = load_mnist5k_splits()
    x = splits.train_x.float() / 255
    assert splits.train_x.dtype == torch.uint8 and splits.train_x.shape == (3000, 1, 28, 28)
    assert abs(x.mean().item() - MNIST5K_MEAN[0]) < 1e-3 and abs(x.std().item() - MNIST5K_STD[0]) < 1e-3
    # real MNIST: the border is background and the centre holds the strokes
    assert x[:, :, :2].mean() < 0.01 and x[:, :, 10:18, 10:18].mean() > 0.3


def test_bundle_sizes_and_downsizing() -> None:
    bundle = build_data(DataConfig(name="mnist5k"), batch_size=100, device="cpu", img_size=14)
    assert bundle.sizes() == {"train_size": 3000, "val_size": 1000, "test_size": 1000}
    x, y = next(iter(bundle.train))
    assert x.shape == (100, 1, 14, 14) and y.dtype == torch.int64
    assert bundle.train.crop_padding == 0 and bundle.train.flip is False  # digits are not mirror-symmetric
