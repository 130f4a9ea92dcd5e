"""The `dataset:` section of a suite, one field per accepted key."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# keys of the `dataset:` section that only one data set reads
DATASET_ONLY_KEYS = {"synthetic": ("num_classes", "synthetic_size", "synthetic_channels", "train_size", "val_size",
                                   "test_size"), "imagefolder": ("randaugment", "num_workers", "val_fraction")}


@dataclass
class DataConfig:
    """Which data set to train on and how to augment it.

    A suite's `dataset:` mapping is applied key by key; every accepted key is a field below (with its default).
    Splits (fixed, stratified, independent of the run seed): digits 1077/360/360, mnist5k 3000/1000/1000,
    cifar 45000/5000 from the official train set + the official 10000 test, imagefolder train/ minus a
    `val_fraction` hold-out / that hold-out / val/ as test, synthetic train_size/val_size/test_size.
    Per-dataset defaults (None) are resolved by `build_data`:
    crop_padding: cifar 4, digits 0, synthetic 0 (scaled with img_size / native size); flip: cifar and imagefolder
    True, digits and synthetic False.
    """

    name: str = "digits"  # one of digits, mnist5k, synthetic, cifar10, cifar100, imagefolder
    root: str | None = None  # folder holding the files (`~` expanded); digits and synthetic ignore it
    download: bool = False  # fetch CIFAR from the internet when `root` lacks it
    crop_padding: int | None = None  # zero padding for random crops, in pixels; None = dataset default
    flip: bool | None = None  # random horizontal flips; None = dataset default
    randaugment: str | None = None  # timm auto-augment string such as "rand-m9-mstd0.5"; imagefolder only
    num_workers: int = 4  # DataLoader worker processes (imagefolder only)
    val_fraction: float = 0.1  # imagefolder only: share of train/ held out (fixed, stratified) as val; val/ is test
    num_classes: int = 10  # synthetic only: number of classes
    synthetic_size: int = 16  # synthetic only: image side in pixels
    synthetic_channels: int = 3  # synthetic only: image channels
    train_size: int = 2048  # synthetic only: training samples
    val_size: int = 512  # synthetic only: validation samples
    test_size: int = 512  # synthetic only: test samples

    def root_path(self) -> Path | None:
        """`root` with `~` expanded, or None when unset."""
        return None if self.root is None else Path(os.path.expanduser(str(self.root)))
