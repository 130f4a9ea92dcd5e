from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from normbench.data import DataConfig, build_data
from normbench.errors import DatasetNotFoundError, SuiteError


def _fake_folder(root: Path, train_per_class: int = 5, val_per_class: int = 2, classes=("cat", "dog")) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for cls in classes:
            folder = root / split / cls
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (12, 14, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


def _cfg(root: Path, **kwargs) -> DataConfig:
    return DataConfig(name="imagefolder", root=str(root), num_workers=0, **kwargs)


def test_batches_and_labels(tmp_path: Path) -> None:
    # 10 train images: val_fraction 0.2 holds out 2 (one per class) as val; the 4 images of val/ are the test split
    bundle = build_data(_cfg(_fake_folder(tmp_path), val_fraction=0.2), batch_size=4, device="cpu", img_size=8)
    assert (bundle.num_classes, bundle.in_chans, bundle.img_size) == (2, 3, 8)
    assert (bundle.num_train, bundle.num_val, bundle.num_test) == (8, 2, 4)
    assert len(bundle.train) == 2 and len(bundle.val) == 1 and len(bundle.test) == 1
    x, y = next(iter(bundle.train))
    assert x.shape == (4, 3, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    xv, yv = next(iter(bundle.val))
    assert xv.shape == (2, 3, 8, 8) and yv.tolist() == [0, 1]  # stratified
    xt, yt = next(iter(bundle.test))
    assert xt.shape == (4, 3, 8, 8) and yt.tolist() == [0, 0, 1, 1]


def test_default_img_size_is_224(tmp_path: Path) -> None:
    bundle = build_data(_cfg(_fake_folder(tmp_path, 2, 1)), batch_size=2, device="cpu")
    assert bundle.img_size == 224
    assert next(iter(bundle.test))[0].shape == (2, 3, 224, 224)


def test_set_epoch_replays_augmentation(tmp_path: Path) -> None:
    root = _fake_folder(tmp_path)
    bundle = build_data(_cfg(root, randaugment="rand-m9-mstd0.5"), batch_size=6, device="cpu", seed=1, img_size=8)

    def epoch(e: int) -> tuple[torch.Tensor, torch.Tensor]:
        bundle.train.set_epoch(e)
        return next(iter(bundle.train))

    x0, y0 = epoch(0)
    x1, _ = epoch(1)
    x0_again, y0_again = epoch(0)
    assert torch.equal(x0, x0_again) and torch.equal(y0, y0_again)
    assert not torch.equal(x0, x1)


def test_workers_do_not_change_batches(tmp_path: Path) -> None:
    root = _fake_folder(tmp_path)
    batches = []
    for workers in (0, 1):
        cfg = DataConfig(name="imagefolder", root=str(root), num_workers=workers)
        bundle = build_data(cfg, batch_size=6, device="cpu", seed=2, img_size=8)
        bundle.train.set_epoch(1)
        batches.append(next(iter(bundle.train)))
    assert torch.equal(batches[0][0], batches[1][0]) and torch.equal(batches[0][1], batches[1][1])


def test_a_pass_resumed_at_a_batch_yields_the_rest_bit_for_bit(tmp_path: Path) -> None:
    """What a checkpoint cut inside an epoch needs of imagefolder: skip the batches trained, decode none of them."""
    root = _fake_folder(tmp_path, train_per_class=8)
    bundle = build_data(_cfg(root, randaugment="rand-m9-mstd0.5", val_fraction=0.25), batch_size=3, device="cpu",
                        seed=3, img_size=8)
    bundle.train.set_epoch(2)
    whole = list(bundle.train)
    assert bundle.train.position() is None  # nothing to keep: (seed, epoch) decide every draw
    bundle.train.set_epoch(2)
    bundle.train.resume_at(2, None)
    rest = list(bundle.train)
    assert len(whole) == 4 and len(rest) == 2
    for (xa, ya), (xb, yb) in zip(whole[2:], rest, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert len(list(bundle.train)) == 4  # only the one pass resumes


def test_missing_split_names_path_and_layout(tmp_path: Path) -> None:
    (tmp_path / "train" / "cat").mkdir(parents=True)
    with pytest.raises(DatasetNotFoundError) as info:
        build_data(_cfg(tmp_path), batch_size=2, device="cpu")
    message = str(info.value)
    assert str(tmp_path / "val") in message and "root/train/<class>" in message


def test_mismatched_classes(tmp_path: Path) -> None:
    _fake_folder(tmp_path)
    (tmp_path / "val" / "dog").rename(tmp_path / "val" / "bird")
    with pytest.raises(DatasetNotFoundError, match="same class folders"):
        build_data(_cfg(tmp_path), batch_size=2, device="cpu")


def test_bad_randaugment_and_crop_padding(tmp_path: Path) -> None:
    root = _fake_folder(tmp_path, 1, 1)
    with pytest.raises(SuiteError, match="dataset.randaugment"):
        build_data(_cfg(root, randaugment="bogus-m9"), batch_size=2, device="cpu")
    with pytest.raises(SuiteError, match="dataset.crop_padding"):
        build_data(_cfg(root, crop_padding=4), batch_size=2, device="cpu")


def test_empty_split_names_the_path(tmp_path: Path) -> None:
    _fake_folder(tmp_path, 1, 1)
    for image in (tmp_path / "val" / "dog").iterdir():
        image.unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        build_data(_cfg(tmp_path), batch_size=2, device="cpu")
    assert str(tmp_path / "val") in str(info.value)
