from __future__ import annotations

import torch

from normbench.data import DataConfig, build_data, synthetic
from normbench.data.synthetic import load_synthetic_splits


def test_deterministic_across_calls_and_cache() -> None:
    a = load_synthetic_splits(num_classes=4, size=8, channels=2, train_size=64, val_size=16)
    synthetic._synthetic_tensors.cache_clear()
    b = load_synthetic_splits(num_classes=4, size=8, channels=2, train_size=64, val_size=16)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
    assert torch.equal(a.val_x, b.val_x) and torch.equal(a.val_y, b.val_y)
    assert torch.equal(a.test_x, b.test_x) and torch.equal(a.test_y, b.test_y)
    assert a.train_x.shape == (64, 2, 8, 8) and a.val_x.shape == (16, 2, 8, 8) and a.test_x.shape == (512, 2, 8, 8)
    assert not torch.equal(a.val_x, a.test_x[:16])  # test is its own draw, not a copy of val
    assert 0 <= a.train_x.min() and a.train_x.max() <= 1
    assert sorted(a.train_y.unique().tolist()) == [0, 1, 2, 3]


def test_learnable_but_not_trivial() -> None:
    s = load_synthetic_splits()
    means = torch.stack([s.train_x[s.train_y == c].mean(0) for c in range(s.num_classes)])
    dist = (s.val_x[:, None] - means[None]).flatten(2).pow(2).sum(-1)
    accuracy = (dist.argmin(1) == s.val_y).float().mean().item()
    # nearest class mean: far above chance (0.1), yet leaves room for models that learn shift invariance
    assert 0.35 < accuracy < 0.9


def test_config_knobs_reach_the_bundle() -> None:
    cfg = DataConfig(
        name="synthetic", num_classes=3, synthetic_size=12, synthetic_channels=1, train_size=30, val_size=9,
        test_size=5,
    )
    bundle = build_data(cfg, batch_size=8, device="cpu")
    assert (bundle.num_classes, bundle.in_chans, bundle.img_size) == (3, 1, 12)
    assert (bundle.num_train, bundle.num_val, bundle.num_test) == (30, 9, 5)
    assert len(bundle.train) == 3 and len(bundle.val) == 2
    assert bundle.train.crop_padding == 0 and bundle.train.flip is False
