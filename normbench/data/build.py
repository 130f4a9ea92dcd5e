"""`build_data`: turn a DataConfig into train/val/test loaders on a device."""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import lru_cache

import torch

from normbench.data.augment import resize_images
from normbench.data.bundle import DataBundle
from normbench.data.config import DataConfig
from normbench.data.device_loader import DeviceLoader
from normbench.data.shard import ShardedLoader
from normbench.data.splits import TensorSplits
from normbench.errors import SuiteError, did_you_mean

DATASETS: tuple[str, ...] = ("digits", "mnist5k", "synthetic", "cifar10", "cifar100", "imagefolder")
IMAGEFOLDER_SIZE = 224  # imagefolder has no native size; this is the default img_size
# at the native size; digits 0: a 1-pixel shift of an 8x8 digit cost ~40 points of val accuracy in 8 epochs
_DEFAULT_PADDING = {"digits": 0, "mnist5k": 0, "synthetic": 0, "cifar10": 4, "cifar100": 4}
_DEFAULT_FLIP = {"digits": False, "mnist5k": False, "synthetic": False, "cifar10": True, "cifar100": True,
                 "imagefolder": True}


def _positive(key: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SuiteError(f"{key}: must be a positive integer, got {value!r}")


def _check(cfg: DataConfig, batch_size: int, img_size: int | None) -> None:
    if cfg.name not in DATASETS:
        raise SuiteError(f"dataset.name: unknown dataset {cfg.name!r}{did_you_mean(cfg.name, DATASETS)}")
    _positive("batch_size", batch_size)
    if img_size is not None:
        _positive("img_size", img_size)
    padding = cfg.crop_padding
    if padding is not None and (isinstance(padding, bool) or not isinstance(padding, int) or padding < 0):
        raise SuiteError(f"dataset.crop_padding: must be an integer >= 0 or null, got {cfg.crop_padding!r}")
    if cfg.name == "imagefolder":
        if cfg.crop_padding is not None:
            raise SuiteError(
                "dataset.crop_padding: imagefolder crops with RandomResizedCrop and takes no padding; remove the key"
            )
        if not isinstance(cfg.num_workers, int) or cfg.num_workers < 0:
            raise SuiteError(f"dataset.num_workers: must be an integer >= 0, got {cfg.num_workers!r}")
        if isinstance(cfg.val_fraction, bool) or not isinstance(cfg.val_fraction, (int, float)) \
                or not 0 < cfg.val_fraction < 1:
            raise SuiteError(f"dataset.val_fraction: the share of train/ held out as val must lie in (0, 1), got "
                             f"{cfg.val_fraction!r}; e.g. 0.1")
    elif cfg.randaugment is not None:
        raise SuiteError(
            f"dataset.randaugment: only imagefolder supports it ({cfg.name} is augmented on the device with "
            "crop_padding and flip); remove the key or use dataset.name: imagefolder"
        )
    if cfg.name in ("cifar10", "cifar100", "imagefolder") and cfg.root is None:
        folder = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}.get(cfg.name, "train and val")
        raise SuiteError(f"dataset.root: {cfg.name} needs it; set it to the folder that contains {folder}")
    if cfg.name == "synthetic":
        for key in ("num_classes", "synthetic_size", "synthetic_channels", "train_size", "val_size", "test_size"):
            _positive(f"dataset.{key}", getattr(cfg, key))
        if cfg.num_classes < 2:
            raise SuiteError(f"dataset.num_classes: synthetic needs at least 2 classes, got {cfg.num_classes}")


def _load_splits(cfg: DataConfig) -> TensorSplits:
    if cfg.name == "digits":
        from normbench.data.digits import load_digits_splits

        return load_digits_splits()
    if cfg.name == "mnist5k":
        from normbench.data.mnist5k import load_mnist5k_splits

        return load_mnist5k_splits()
    if cfg.name == "synthetic":
        from normbench.data.synthetic import load_synthetic_splits

        return load_synthetic_splits(
            num_classes=cfg.num_classes,
            size=cfg.synthetic_size,
            channels=cfg.synthetic_channels,
            train_size=cfg.train_size,
            val_size=cfg.val_size,
            test_size=cfg.test_size,
        )
    from normbench.data.cifar import load_cifar_splits

    root = cfg.root_path()
    assert root is not None  # checked by _check
    return load_cifar_splits(cfg.name, root, download=cfg.download)


def _device_bundle(
    cfg: DataConfig, *, batch_size: int, device: torch.device, seed: int, img_size: int | None
) -> DataBundle:
    splits = _load_splits(cfg)
    native = int(splits.train_x.shape[-1])
    size = img_size or native
    padding = cfg.crop_padding
    if padding is None:  # the default is set at the native size; keep it the same fraction of the image
        padding = round(_DEFAULT_PADDING[cfg.name] * size / native)
    flip = _DEFAULT_FLIP[cfg.name] if cfg.flip is None else bool(cfg.flip)
    # resize once, on the device (fast on GPU), instead of every batch
    train_x = resize_images(splits.train_x.to(device), size)
    val_x = resize_images(splits.val_x.to(device), size)
    test_x = resize_images(splits.test_x.to(device), size)
    common = {"batch_size": batch_size, "mean": splits.mean, "std": splits.std, "seed": seed}
    train = DeviceLoader(train_x, splits.train_y.to(device), train=True, crop_padding=padding, flip=flip, **common)
    val = DeviceLoader(val_x, splits.val_y.to(device), train=False, **common)
    test = DeviceLoader(test_x, splits.test_y.to(device), train=False, **common)
    return DataBundle.of(cfg.name, train, val, test, num_classes=splits.num_classes, in_chans=int(train_x.shape[1]),
                         img_size=size, mean=splits.mean, std=splits.std)


@lru_cache(maxsize=8)
def _sizes(cfg_json: str) -> tuple[tuple[str, int], ...]:
    cfg = DataConfig(**json.loads(cfg_json))
    return tuple(build_data(cfg, batch_size=1, device="cpu").sizes().items())


def split_sizes(cfg: DataConfig) -> dict[str, int]:
    """The true {"train_size", "val_size", "test_size"} of the data set `cfg` names (loaded once per process)."""
    return dict(_sizes(json.dumps(asdict(cfg), sort_keys=True)))


def _check_split(batch_size: int, num_train: int, world: int) -> None:
    """A train set smaller than the batch caps the batch at its size, which must still split evenly."""
    if batch_size % world:
        raise SuiteError(f"train.batch_size: the {num_train}-image train set caps the batch at {batch_size}, which "
                         f"does not split over {world} processes; use fewer processes or a multiple of {world}")


def build_data(
    cfg: DataConfig,
    *,
    batch_size: int,
    device: str | torch.device,
    seed: int = 0,
    img_size: int | None = None,
    shard: tuple[int, int] = (0, 1),
) -> DataBundle:
    """Load the data set `cfg` names and wrap its train/val/test splits in loaders that yield batches on `device`.

    digits, synthetic, cifar10 and cifar100 live entirely on the device and are augmented there; imagefolder is
    decoded by DataLoader workers with timm transforms.

    Args:
        cfg: The `dataset:` section.
        batch_size: Samples per batch for both loaders (train caps it at the train set size).
        device: Where batches are yielded, e.g. "cpu" or "cuda".
        seed: Run seed; shuffling and augmentation follow from (seed, epoch). Splits never depend on it.
        img_size: Image side; None keeps the native size (digits 8, mnist5k 28, cifar 32, synthetic its size,
            imagefolder 224).
            A different size resizes device-resident sets once at load (bilinear, antialiased when shrinking).
        shard: (rank, world) of a cell trained over several processes: the loaders yield this rank's slice of
            every global batch of `batch_size` (normbench/data/shard.py). (0, 1) is one process.

    Returns:
        A DataBundle; x is float32 (B, C, img_size, img_size) normalized per channel, y int64 (B,).

    Raises:
        SuiteError: An unknown dataset name or a setting the data set cannot honour.
        DatasetNotFoundError: The files are not under `cfg.root`.
    """
    _check(cfg, batch_size, img_size)
    device = torch.device(device)
    rank, world = shard
    if batch_size % world:
        raise SuiteError(f"train.batch_size: {batch_size} does not split over {world} processes; use a multiple")
    if cfg.name != "imagefolder":
        bundle = _device_bundle(cfg, batch_size=batch_size, device=device, seed=seed, img_size=img_size)
        if world > 1:
            _check_split(bundle.train.batch_size, bundle.num_train, world)  # type: ignore[attr-defined]
            bundle.train = ShardedLoader(bundle.train, rank, world)
            bundle.val = ShardedLoader(bundle.val, rank, world)
            bundle.test = ShardedLoader(bundle.test, rank, world)
        return bundle
    from normbench.data.imagefolder import build_imagefolder_loaders

    root = cfg.root_path()
    assert root is not None  # checked by _check
    size = img_size or IMAGEFOLDER_SIZE
    train, val, test, num_classes = build_imagefolder_loaders(
        root,
        img_size=size,
        batch_size=batch_size,
        device=device,
        seed=seed,
        randaugment=cfg.randaugment,
        flip=True if cfg.flip is None else bool(cfg.flip),
        num_workers=cfg.num_workers,
        shard=shard,
        val_fraction=cfg.val_fraction,
    )
    _check_split(train.batch_size, train.num_samples, world)
    from timm.data import DEFAULT_CROP_PCT, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD  # imagefolder's transforms'

    return DataBundle.of(cfg.name, train, val, test, num_classes=num_classes, in_chans=3, img_size=size,
                         mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=DEFAULT_CROP_PCT)
