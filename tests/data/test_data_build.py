from __future__ import annotations

import pytest
import torch

from normbench.data import DATASETS, DataConfig, build_data
from normbench.errors import SuiteError


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(SuiteError) as info:
        build_data(DataConfig(name="cifar"), batch_size=4, device="cpu")
    assert "dataset.name" in str(info.value) and "'cifar'" in str(info.value) and "cifar10" in str(info.value)
    assert set(DATASETS) == {"digits", "mnist5k", "synthetic", "cifar10", "cifar100", "imagefolder"}


@pytest.mark.parametrize("name", ["digits", "synthetic", "cifar10"])
def test_randaugment_only_for_imagefolder(name: str) -> None:
    with pytest.raises(SuiteError, match="dataset.randaugment"):
        build_data(DataConfig(name=name, root="/x", randaugment="rand-m9"), batch_size=4, device="cpu")


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        (DataConfig(crop_padding=-1), "dataset.crop_padding"),
        (DataConfig(name="synthetic", num_classes=1), "dataset.num_classes"),
        (DataConfig(name="synthetic", train_size=0), "dataset.train_size"),
        (DataConfig(name="synthetic", test_size=0), "dataset.test_size"),
        (DataConfig(name="imagefolder", root="/x", num_workers=0, val_fraction=1.0), "dataset.val_fraction"),
    ],
)
def test_bad_values_name_the_key(cfg: DataConfig, key: str) -> None:
    with pytest.raises(SuiteError, match=key):
        build_data(cfg, batch_size=4, device="cpu")


def test_bad_batch_size() -> None:
    with pytest.raises(SuiteError, match="batch_size"):
        build_data(DataConfig(), batch_size=0, device="cpu")


def test_img_size_resizes_and_scales_default_padding() -> None:
    bundle = build_data(DataConfig(name="digits"), batch_size=32, device=torch.device("cpu"), img_size=16)
    assert bundle.img_size == 16 and bundle.train.crop_padding == 0  # digits default 0 scales to 0
    x, _ = next(iter(bundle.train))
    assert x.shape == (32, 1, 16, 16)
    explicit = build_data(
        DataConfig(name="digits", crop_padding=3, flip=True), batch_size=32, device="cpu", img_size=16
    )
    assert explicit.train.crop_padding == 3 and explicit.train.flip is True
