"""Images on disk in class folders (root/train/<class>/*.jpg, root/val/<class>/*.jpg), decoded by DataLoader workers.

As ImageNet papers report it, root/val is the test split; our val split is a fixed stratified hold-out of
root/train (`val_fraction`, default 0.1), so choosing the lr never reads the reported split.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from normbench.data.seeding import epoch_seed
from normbench.data.shard import ShardedSampler
from normbench.data.splits import stratified_holdout
from normbench.errors import DatasetNotFoundError, SuiteError

LAYOUT_HINT = "expected root/train/<class>/*.jpg and root/val/<class>/*.jpg (any image format PIL reads)"


@contextmanager
def _seeded_rngs(seed: int) -> Iterator[None]:
    """Seed Python's, NumPy's and torch's CPU global RNGs (what timm/torchvision transforms draw from), then restore
    them, so a sample's augmentation depends only on `seed` and the caller's RNG streams are left untouched."""
    py_state, np_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.default_generator.manual_seed(seed)  # CPU only: torch.manual_seed would also reseed CUDA
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)


class _SeededSampler(Sampler[tuple[int, int]]):
    """Shuffled (index, sample_seed) pairs drawn from (seed, epoch); runs in the main process every epoch, so the
    seeds reach the workers even when they are persistent."""

    def __init__(self, num_samples: int, seed: int) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0
        self.skip = 0  # samples the next pass leaves out at its start (a pass resumed from a checkpoint)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        order = torch.randperm(self.num_samples, generator=generator).tolist()
        seeds = torch.randint(0, 2**62, (self.num_samples,), generator=generator).tolist()
        skip, self.skip = self.skip, 0
        return iter(list(zip(order, seeds, strict=True))[skip:])

    def __len__(self) -> int:
        return self.num_samples


class _SeededDataset(Dataset):
    """Applies `base[index]` under RNGs seeded per sample, keyed by the (index, seed) pairs of `_SeededSampler`."""

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __getitem__(self, key: tuple[int, int]) -> tuple[Tensor, int]:
        index, seed = key
        with _seeded_rngs(seed):
            return self.base[index]

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]


class ImageFolderLoader:
    """A DataLoader over an ImageFolder that moves each batch to `device` (non-blocking).

    Training shuffles and augments from (seed, epoch) alone, independent of worker count: call `set_epoch` every
    epoch. Validation keeps order and the last partial batch.

    Args:
        dataset: A torchvision ImageFolder with its transform set.
        batch_size: Samples per batch; for training, capped at the set size.
        device: Where batches go.
        train: Shuffle, augment and drop the last partial batch.
        seed: Run seed (default 0).
        num_workers: Decoding processes (default 4; 0 decodes in the main process).
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        device: torch.device,
        train: bool,
        seed: int = 0,
        num_workers: int = 4,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        num_samples = len(dataset)  # type: ignore[arg-type]
        rank, world = shard
        self.device = device
        self.train = train
        self.seed = seed
        self.num_samples = num_samples
        self.batch_size = min(batch_size, num_samples) if train else batch_size
        self._generator = torch.Generator().manual_seed(epoch_seed(seed, 0))
        self._sampler = _SeededSampler(num_samples, seed) if train else None
        sampler: Sampler | None = self._sampler
        if world > 1 and train:  # this rank decodes only its slice of each global batch
            sampler = ShardedSampler(self._sampler, self.batch_size, rank, world)  # type: ignore[arg-type]
        elif world > 1:  # validation: every world-th image; the accuracy is summed over ranks
            dataset = Subset(dataset, range(rank, num_samples, world))
        self._loader = DataLoader(
            _SeededDataset(dataset) if train else dataset,
            batch_size=self.batch_size // world if train else self.batch_size,
            sampler=sampler,
            shuffle=False,
            drop_last=train,
            num_workers=num_workers,
            pin_memory=device.type == "cuda",
            persistent_workers=num_workers > 0,
            generator=self._generator,
        )

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle order and augmentation draws of `epoch` (no effect on validation)."""
        if self._sampler is not None:
            self._sampler.epoch = int(epoch)
        self._generator.manual_seed(epoch_seed(self.seed, epoch))

    def position(self) -> Tensor | None:
        """Nothing to keep: a pass's order and every sample's augmentation follow from (seed, epoch) alone."""
        return None

    def resume_at(self, batch: int, generator_state: Tensor | None = None) -> None:
        """Make the next training pass of the current epoch start at global batch `batch` (no image before it is
        decoded)."""
        if self._sampler is not None:
            self._sampler.skip = int(batch) * self.batch_size

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for x, y in self._loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def _image_folder(path: Path, transform: Callable) -> Dataset:
    from torchvision.datasets import ImageFolder

    try:
        return ImageFolder(str(path), transform=transform)
    except FileNotFoundError as err:  # no class folders, or class folders without images
        raise DatasetNotFoundError(f"imagefolder: {path}: {err}; {LAYOUT_HINT}") from None


def _transforms(img_size: int, randaugment: str | None, flip: bool) -> tuple[Callable, Callable]:
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, create_transform

    norm = {"mean": IMAGENET_DEFAULT_MEAN, "std": IMAGENET_DEFAULT_STD}
    try:
        train_tf = create_transform(
            img_size, is_training=True, auto_augment=randaugment, hflip=0.5 if flip else 0.0, **norm
        )
    except Exception as err:  # timm parses the string and raises assorted errors (assert, KeyError, ValueError)
        raise SuiteError(
            f"dataset.randaugment: cannot parse {randaugment!r} ({type(err).__name__}: {err}); "
            "use a timm auto-augment string such as 'rand-m9-mstd0.5'"
        ) from None
    return train_tf, create_transform(img_size, is_training=False, **norm)


def build_imagefolder_loaders(
    root: Path,
    *,
    img_size: int,
    batch_size: int,
    device: torch.device,
    seed: int = 0,
    randaugment: str | None = None,
    flip: bool = True,
    num_workers: int = 4,
    shard: tuple[int, int] = (0, 1),
    val_fraction: float = 0.1,
) -> tuple[ImageFolderLoader, ImageFolderLoader, ImageFolderLoader, int]:
    """Train, val and test loaders plus the number of classes: train and val split `root/train` (val is a fixed,
    stratified `val_fraction` of it, default 0.1), test is `root/val`.

    Train uses timm's ImageNet recipe (RandomResizedCrop, optional flip, RandAugment or color jitter); val and test
    resize to img_size / 0.875 and center-crop. All normalize with ImageNet mean/std.

    Raises:
        DatasetNotFoundError: A split folder is missing, empty, or its classes differ from the other's.
        SuiteError: `randaugment` is not a valid timm auto-augment string.
    """
    for split in ("train", "val"):  # check both before the slow directory scan
        if not (root / split).is_dir():
            raise DatasetNotFoundError(f"imagefolder: no folder {root / split}; {LAYOUT_HINT}")
    train_tf, val_tf = _transforms(img_size, randaugment, flip)
    full_train = _image_folder(root / "train", train_tf)
    full_val = _image_folder(root / "train", val_tf)  # the same files, seen through the eval transform
    val_set = _image_folder(root / "val", val_tf)
    train_classes, val_classes = full_train.classes, val_set.classes  # type: ignore[attr-defined]
    if train_classes != val_classes:
        only_train = sorted(set(train_classes) - set(val_classes))
        only_val = sorted(set(val_classes) - set(train_classes))
        raise DatasetNotFoundError(
            f"imagefolder: {root / 'train'} and {root / 'val'} must hold the same class folders "
            f"(only in train: {only_train[:5]}, only in val: {only_val[:5]}); {LAYOUT_HINT}"
        )
    targets = np.asarray(full_train.targets)  # type: ignore[attr-defined]
    held = max(1, round(val_fraction * len(targets)))
    if held >= len(targets):
        raise DatasetNotFoundError(f"imagefolder: {root / 'train'} holds {len(targets)} images, too few to hold out "
                                   f"a val split of {val_fraction:g}; add images or lower dataset.val_fraction")
    train_idx, val_idx = stratified_holdout(targets, held)
    common = {"batch_size": batch_size, "device": device, "seed": seed, "num_workers": num_workers, "shard": shard}
    train = ImageFolderLoader(Subset(full_train, train_idx.tolist()), train=True, **common)
    val = ImageFolderLoader(Subset(full_val, val_idx.tolist()), train=False, **common)
    test = ImageFolderLoader(val_set, train=False, **common)
    return train, val, test, len(train_classes)
