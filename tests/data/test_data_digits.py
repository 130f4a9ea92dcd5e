from __future__ import annotations

import hashlib

import numpy as np
import torch

from normbench.data import DataConfig, build_data
from normbench.data.digits import DIGITS_MEAN, DIGITS_STD, digits_split_indices, load_digits_splits


def test_shapes_and_classes() -> None:
    bundle = build_data(DataConfig(name="digits"), batch_size=64, device="cpu")
    assert (bundle.num_classes, bundle.in_chans, bundle.img_size) == (10, 1, 8)
    assert (bundle.num_train, bundle.num_val, bundle.num_test) == (1077, 360, 360)
    assert bundle.sizes() == {"train_size": 1077, "val_size": 360, "test_size": 360}
    x, y = next(iter(bundle.train))
    assert x.shape == (64, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (64,) and y.dtype == torch.int64
    labels = torch.cat([y for _, y in bundle.val])
    assert sorted(labels.unique().tolist()) == list(range(10))


def split_digest(parts) -> str:
    """A short fingerprint of (train, val, test) indices."""
    return hashlib.sha256(b"".join(np.asarray(p, dtype=np.int64).tobytes() for p in parts)).hexdigest()[:16]


def test_split_is_fixed_disjoint_and_stratified() -> None:
    train_idx, val_idx, test_idx = digits_split_indices()
    # fixed: the split every published digits result was trained and scored on (a change would move images between
    # train, val and test, and make new results incomparable with the committed ones)
    assert split_digest((train_idx, val_idx, test_idx)) == "b90465a57061b194"
    for a, b in ((train_idx, val_idx), (train_idx, test_idx), (val_idx, test_idx)):
        assert len(np.intersect1d(a, b)) == 0
    assert len(np.union1d(np.union1d(train_idx, val_idx), test_idx)) == 1797
    splits = load_digits_splits()
    for labels in (splits.val_y, splits.test_y):
        counts = np.bincount(labels.numpy(), minlength=10)
        assert counts.min() >= 35 and counts.max() <= 37  # stratified: ~36 per class

    # the run seed changes the order of training batches, never which images are in which split
    a = build_data(DataConfig(name="digits"), batch_size=64, device="cpu", seed=0)
    b = build_data(DataConfig(name="digits"), batch_size=64, device="cpu", seed=1)
    assert torch.equal(a.train.images, b.train.images)
    for split in ("val", "test"):
        for (xa, ya), (xb, yb) in zip(getattr(a, split), getattr(b, split), strict=True):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(next(iter(a.train))[1], next(iter(b.train))[1])


def test_normalization_constants_match_the_training_split() -> None:
    splits = load_digits_splits()
    assert abs(splits.train_x.mean().item() - DIGITS_MEAN[0]) < 1e-3
    assert abs(splits.train_x.std().item() - DIGITS_STD[0]) < 1e-3
    assert splits.train_x.min() == 0 and splits.train_x.max() == 1

    bundle = build_data(DataConfig(name="digits"), batch_size=400, device="cpu")
    x = torch.cat([x for x, _ in bundle.val])
    assert abs(x.mean().item()) < 0.1 and abs(x.std().item() - 1) < 0.1


def test_defaults_are_no_crop_and_no_flip() -> None:
    bundle = build_data(DataConfig(name="digits"), batch_size=64, device="cpu")
    assert bundle.train.crop_padding == 0 and bundle.train.flip is False
