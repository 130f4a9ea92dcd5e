"""What `build_data` returns: train, val and test loaders and the shape facts a model needs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor


class Loader(Protocol):
    """Yields `(x, y)` on the target device: x float32 (B, C, H, W) normalized, y int64 (B,)."""

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]: ...

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...


@dataclass
class DataBundle:
    """Train, validation and test loaders plus the facts needed to build a model for them.

    Selection (lr, tuned config) reads val only; test is evaluated once, at the final epoch, for the score.

    Attributes:
        num_classes: Number of labels.
        in_chans: Image channels C.
        img_size: Image side H = W after any resizing.
        num_train: Training samples (before drop_last).
        num_val: Validation samples.
        num_test: Test samples.
        train: Shuffled, augmented loader that drops the last partial batch; call `set_epoch` every epoch.
        val: Ordered, unaugmented loader that keeps the last partial batch.
        test: Like `val`, over the test split.
        name: Data set name, e.g. "cifar10".
        mean: Per-channel mean of the [0, 1] pixels the loaders normalise with.
        std: Per-channel standard deviation, likewise.
        crop_pct: Evaluation resizes to img_size / crop_pct, then centre-crops img_size (1.0: the device-resident
            sets, resized once, bilinear).
    """

    num_classes: int
    in_chans: int
    img_size: int
    num_train: int
    num_val: int
    num_test: int
    train: Loader
    val: Loader
    test: Loader
    name: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_pct: float = 1.0

    @classmethod
    def of(cls, name: str, train: Loader, val: Loader, test: Loader, *, num_classes: int, in_chans: int,
           img_size: int, mean: tuple[float, ...], std: tuple[float, ...], crop_pct: float = 1.0) -> DataBundle:
        """A bundle whose sample counts are read from the loaders' `num_samples`."""
        return cls(num_classes=num_classes, in_chans=in_chans, img_size=img_size,
                   num_train=train.num_samples, num_val=val.num_samples,  # type: ignore[attr-defined]
                   num_test=test.num_samples,  # type: ignore[attr-defined]
                   train=train, val=val, test=test, name=name, mean=tuple(mean), std=tuple(std), crop_pct=crop_pct)

    def timm_data_cfg(self) -> dict[str, object]:
        """The data as timm's `pretrained_cfg` describes it: `resolve_data_config` + `create_transform(...)` on a
        model carrying it evaluate images as the val and test loaders do (kept weights, model/weights_file.py)."""
        return {"num_classes": self.num_classes, "input_size": (self.in_chans, self.img_size, self.img_size),
                "mean": self.mean, "std": self.std, "crop_pct": self.crop_pct, "crop_mode": "center",
                "interpolation": "bilinear"}

    def sizes(self) -> dict[str, int]:
        """The true split sizes, as logged: {"train_size", "val_size", "test_size"}."""
        return {"train_size": self.num_train, "val_size": self.num_val, "test_size": self.num_test}
