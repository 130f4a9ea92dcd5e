from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from normbench.data import DataConfig, build_data
from normbench.data.cifar import LAYOUTS, load_cifar_splits
from normbench.data.splits import stratified_holdout
from normbench.errors import DatasetNotFoundError, SuiteError


def _write(path: Path, count: int, label_key: bytes, num_classes: int, rng: np.random.Generator) -> None:
    # the real files are Python 2 pickles whose keys load as bytes
    entry = {
        b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
        label_key: rng.integers(0, num_classes, count).tolist(),
        b"filenames": [b"x.png"] * count,
    }
    with path.open("wb") as f:
        pickle.dump(entry, f)


def _fake_cifar(root: Path, name: str) -> dict[str, list[Path]]:
    """Tiny files in the real layout: 5 train batches of 4 for CIFAR-10, one file per split for CIFAR-100."""
    layout = LAYOUTS[name]
    folder = root / layout.folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    key = layout.label_key.encode()
    for file in layout.train_files:
        _write(folder / file, 4 if name == "cifar10" else 20, key, layout.num_classes, rng)
    for file in layout.val_files:
        _write(folder / file, 6, key, layout.num_classes, rng)
    meta = "batches.meta" if name == "cifar10" else "meta"
    with (folder / meta).open("wb") as f:
        pickle.dump({b"label_names": [b"c"] * layout.num_classes}, f)
    return {
        "train": [folder / file for file in layout.train_files],
        "val": [folder / file for file in layout.val_files],
    }


def _read(paths: list[Path], label_key: str) -> tuple[np.ndarray, np.ndarray]:
    entries = [pickle.loads(p.read_bytes()) for p in paths]
    data = np.concatenate([e[b"data"] for e in entries]).reshape(-1, 3, 32, 32)
    return data, np.concatenate([e[label_key.encode()] for e in entries])


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_reads_the_pickle_format_exactly(tmp_path: Path, name: str) -> None:
    files = _fake_cifar(tmp_path, name)
    layout = LAYOUTS[name]
    splits = load_cifar_splits(name, tmp_path)
    data, labels = _read(files["train"], layout.label_key)
    train_idx, val_idx = stratified_holdout(labels, 2)  # val: 10% of the official train files
    test_data, test_labels = _read(files["val"], layout.label_key)  # the official test file is our test split
    for x, y, want_x, want_y in ((splits.train_x, splits.train_y, data[train_idx], labels[train_idx]),
                                 (splits.val_x, splits.val_y, data[val_idx], labels[val_idx]),
                                 (splits.test_x, splits.test_y, test_data, test_labels)):
        assert x.dtype == torch.uint8 and torch.equal(x, torch.from_numpy(want_x))
        assert y.dtype == torch.int64 and torch.equal(y, torch.from_numpy(want_y))
    assert splits.num_classes == layout.num_classes


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_bundle_round_trips_pixels_and_labels(tmp_path: Path, name: str) -> None:
    files = _fake_cifar(tmp_path, name)
    bundle = build_data(DataConfig(name=name, root=str(tmp_path)), batch_size=4, device="cpu")
    assert (bundle.num_classes, bundle.in_chans, bundle.img_size) == (LAYOUTS[name].num_classes, 3, 32)
    assert (bundle.num_train, bundle.num_val, bundle.num_test) == (18, 2, 6)
    assert len(bundle.train) == 4 and len(bundle.val) == 1 and len(bundle.test) == 2
    assert bundle.train.crop_padding == 4 and bundle.train.flip is True
    x = torch.cat([xb for xb, _ in bundle.test])
    y = torch.cat([yb for _, yb in bundle.test])
    mean = torch.tensor(LAYOUTS[name].mean).view(1, 3, 1, 1)
    std = torch.tensor(LAYOUTS[name].std).view(1, 3, 1, 1)
    data, labels = _read(files["val"], LAYOUTS[name].label_key)
    assert torch.equal(((x * std + mean) * 255).round().to(torch.uint8), torch.from_numpy(data))
    assert torch.equal(y, torch.from_numpy(labels))
    xb, yb = next(iter(bundle.train))
    assert xb.shape == (4, 3, 32, 32) and xb.dtype == torch.float32 and yb.dtype == torch.int64


def test_img_size_resizes_once_and_keeps_uint8(tmp_path: Path) -> None:
    _fake_cifar(tmp_path, "cifar10")
    bundle = build_data(DataConfig(name="cifar10", root=str(tmp_path)), batch_size=4, device="cpu", img_size=16)
    assert bundle.img_size == 16 and bundle.train.images.dtype == torch.uint8
    assert bundle.train.images.shape == (18, 3, 16, 16)
    assert bundle.train.crop_padding == 2  # default 4 at 32 px, scaled with the image
    assert next(iter(bundle.train))[0].shape == (4, 3, 16, 16)


def test_missing_root_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as info:
        build_data(DataConfig(name="cifar10", root=str(missing)), batch_size=4, device="cpu")
    assert str(missing / "cifar-10-batches-py") in str(info.value)
    assert "download" in str(info.value) and "cifar.html" in str(info.value)


def test_missing_batch_names_the_file(tmp_path: Path) -> None:
    files = _fake_cifar(tmp_path, "cifar10")
    files["train"][4].unlink()
    with pytest.raises(DatasetNotFoundError, match="data_batch_5"):
        load_cifar_splits("cifar10", tmp_path)


def test_root_is_required() -> None:
    with pytest.raises(SuiteError, match="dataset.root"):
        build_data(DataConfig(name="cifar100"), batch_size=4, device="cpu")


def test_download_uses_torchvision_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets.utils as tv_utils
    from torchvision.datasets import CIFAR100

    calls = []

    def fake_download(url: str, download_root: str, filename: str, md5: str) -> None:
        calls.append((url, download_root, filename, md5))
        _fake_cifar(Path(download_root), "cifar100")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", fake_download)
    splits = load_cifar_splits("cifar100", tmp_path, download=True)
    assert calls == [(CIFAR100.url, str(tmp_path), CIFAR100.filename, CIFAR100.tgz_md5)]
    assert splits.train_x.shape == (18, 3, 32, 32)
    load_cifar_splits("cifar100", tmp_path, download=True)  # present now: no second download
    assert len(calls) == 1
