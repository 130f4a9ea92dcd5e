"""CIFAR-10 / CIFAR-100 from the "python version" pickles, read directly (no checksum, so small test files work)."""

from __future__ import annotations

import pickle
import socket
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from urllib.error import URLError

import numpy as np
import torch

from normbench.data.splits import TensorSplits, stratified_holdout
from normbench.errors import DatasetNotFoundError

HOME_PAGE = "https://www.cs.toronto.edu/~kriz/cifar.html"
VAL_FRACTION = 0.1  # of the official train set, held out for val: 50000 -> 45000 train / 5000 val


@dataclass(frozen=True)
class CifarLayout:
    """Where one CIFAR variant keeps its files and what they hold."""

    folder: str  # extracted folder inside `root`
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    label_key: str
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


LAYOUTS = {
    "cifar10": CifarLayout(
        folder="cifar-10-batches-py",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        val_files=("test_batch",),
        label_key="labels",
        num_classes=10,
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),  # per-pixel std over the training set (not the often-copied 0.2023, ...)
    ),
    "cifar100": CifarLayout(
        folder="cifar-100-python",
        train_files=("train",),
        val_files=("test",),
        label_key="fine_labels",
        num_classes=100,
        mean=(0.5071, 0.4865, 0.4409),
        std=(0.2673, 0.2564, 0.2762),
    ),
}


# what a download without network raises (urllib wraps most in URLError); a full disk stays an OSError
NETWORK_ERRORS = (URLError, ConnectionError, TimeoutError, socket.gaierror, HTTPException)


def _download(name: str, root: Path) -> None:
    from torchvision.datasets import CIFAR10, CIFAR100
    from torchvision.datasets.utils import download_and_extract_archive

    source = CIFAR10 if name == "cifar10" else CIFAR100
    created = _missing_folders(root)
    try:
        download_and_extract_archive(source.url, str(root), filename=source.filename, md5=source.tgz_md5)
    except NETWORK_ERRORS as e:
        (root / source.filename).unlink(missing_ok=True)  # a partial archive: never complete, as the error says
        for folder in created:  # innermost first; leave no empty data folder behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise DatasetNotFoundError(
            f"{name}: download of {source.url} failed ({getattr(e, 'reason', None) or e}): no network here? Fetch "
            f"{source.filename} elsewhere and put it in dataset.root ({root}); download: true then extracts it "
            "without the network (or extract it there yourself and set download: false)"
        ) from None


def _missing_folders(path: Path) -> list[Path]:
    """`path` and its ancestors that do not exist yet, innermost first: what a download would create."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _read_batch(path: Path, label_key: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise DatasetNotFoundError(
            f"{name}: missing file {path}; the extracted 'python version' from {HOME_PAGE} is incomplete, "
            "delete the folder and extract it again (or set dataset.download: true, needs internet)"
        )
    with path.open("rb") as f:
        # the official files are Python 2 pickles; "bytes" keeps their keys as b"data", b"labels"
        entry = pickle.load(f, encoding="bytes")
    entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
    try:
        data = np.asarray(entry["data"], dtype=np.uint8)
        labels = np.asarray(entry[label_key], dtype=np.int64)
    except KeyError as err:
        raise DatasetNotFoundError(f"{name}: {path} lacks key {err}; not a CIFAR 'python version' file") from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise DatasetNotFoundError(
            f"{name}: {path} holds data of shape {data.shape} and {len(labels)} labels, "
            "expected (N, 3072) uint8 and N labels; download it again"
        )
    return data.reshape(-1, 3, 32, 32), labels


def _read_split(folder: Path, files: tuple[str, ...], layout: CifarLayout, name: str) -> tuple[torch.Tensor, ...]:
    parts = [_read_batch(folder / file, layout.label_key, name) for file in files]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.size and (labels.min() < 0 or labels.max() >= layout.num_classes):
        raise DatasetNotFoundError(f"{name}: labels in {folder} fall outside 0..{layout.num_classes - 1}")
    return torch.from_numpy(images), torch.from_numpy(labels)


def load_cifar_splits(name: str, root: Path, *, download: bool = False) -> TensorSplits:
    """Read CIFAR-10 or CIFAR-100 from `root/cifar-10-batches-py` or `root/cifar-100-python`.

    Args:
        name: "cifar10" or "cifar100".
        root: Folder that contains the extracted folder.
        download: When the extracted folder is missing, download and extract it into `root` (default False).

    Returns:
        uint8 (N, 3, 32, 32) images. For the real files: 45000 train and 5000 val (a fixed stratified hold-out of
        the official train set) and 10000 test (the official test set).

    Raises:
        DatasetNotFoundError: The folder or one of its files is missing or malformed.
    """
    layout = LAYOUTS[name]
    folder = root / layout.folder
    if not folder.is_dir() and download:
        _download(name, root)
    if not folder.is_dir():
        raise DatasetNotFoundError(
            f"{name}: no data at {folder}; set dataset.download: true (needs internet) or put the extracted "
            f"'python version' of {name.upper().replace('CIFAR', 'CIFAR-')} at {folder} from {HOME_PAGE}"
        )
    full_x, full_y = _read_split(folder, layout.train_files, layout, name)
    test_x, test_y = _read_split(folder, layout.val_files, layout, name)
    train_idx, val_idx = (torch.from_numpy(i) for i in
                          stratified_holdout(full_y.numpy(), max(1, round(VAL_FRACTION * len(full_y)))))
    return TensorSplits(full_x[train_idx], full_y[train_idx], full_x[val_idx], full_y[val_idx], test_x, test_y,
                        layout.num_classes, layout.mean, layout.std)
