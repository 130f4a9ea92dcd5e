from __future__ import annotations

import pytest
import torch

from normbench.data.device_loader import DeviceLoader

MEAN, STD = (0.25, 0.5), (0.5, 2.0)


def _images(n: int = 20, size: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(n, 2, size, size, generator=generator), torch.arange(n)  # label i marks image i


def _loader(train: bool = True, **kwargs) -> DeviceLoader:
    x, y = _images()
    return DeviceLoader(x, y, batch_size=kwargs.pop("batch_size", 8), mean=MEAN, std=STD, train=train, **kwargs)


def _batches(loader: DeviceLoader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(loader)


def test_set_epoch_replays_and_changes_batches() -> None:
    loader = _loader(crop_padding=2, flip=True, seed=5)
    loader.set_epoch(3)
    first = _batches(loader)
    loader.set_epoch(4)
    other = _batches(loader)
    loader.set_epoch(3)
    again = _batches(loader)
    for (xa, ya), (xb, yb) in zip(first, again, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(torch.cat([y for _, y in first]), torch.cat([y for _, y in other]))
    fresh = _loader(crop_padding=2, flip=True, seed=5)
    fresh.set_epoch(3)
    assert torch.equal(_batches(fresh)[0][0], first[0][0])  # a new loader (e.g. after resume) agrees


def test_a_pass_resumed_from_its_position_yields_the_rest_bit_for_bit() -> None:
    """What a checkpoint cut inside an epoch keeps: the batch index and the generator state before its draws."""
    loader = _loader(crop_padding=2, flip=True, seed=5, batch_size=4)
    loader.set_epoch(2)
    whole, kept = [], None
    for i, batch in enumerate(loader):
        whole.append(batch)
        if i == 2:
            kept = loader.position()
    assert kept is not None
    fresh = _loader(crop_padding=2, flip=True, seed=5, batch_size=4)
    fresh.set_epoch(2)
    fresh.resume_at(2, kept)
    rest = list(fresh)
    assert len(rest) == len(whole) - 2
    for (xa, ya), (xb, yb) in zip(whole[2:], rest, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert len(list(fresh)) == len(whole)  # only the one pass resumes


def test_no_augmentation_gives_normalized_originals() -> None:
    x, _ = _images()
    loader = _loader(crop_padding=0, flip=False)
    mean, std = torch.tensor(MEAN).view(1, -1, 1, 1), torch.tensor(STD).view(1, -1, 1, 1)
    seen = []
    for xb, yb in loader:
        assert torch.allclose(xb, (x[yb] - mean) / std, atol=1e-6)
        seen.append(yb)
    assert len(torch.cat(seen).unique()) == 16  # 2 batches of 8, no repeats


def test_augmentation_changes_pixels_but_not_shapes() -> None:
    x, _ = _images()
    mean, std = torch.tensor(MEAN).view(1, -1, 1, 1), torch.tensor(STD).view(1, -1, 1, 1)
    for kwargs in ({"crop_padding": 2, "flip": False}, {"crop_padding": 0, "flip": True}):
        xb, yb = next(iter(_loader(**kwargs)))
        assert xb.shape == (8, 2, 6, 6)
        assert not torch.allclose(xb, (x[yb] - mean) / std)


def test_uint8_images_are_scaled_by_255() -> None:
    x = torch.randint(0, 256, (5, 2, 3, 3), dtype=torch.uint8)
    loader = DeviceLoader(x, torch.zeros(5, dtype=torch.long), batch_size=4, mean=MEAN, std=STD, train=False)
    out = torch.cat([xb for xb, _ in loader])
    mean, std = torch.tensor(MEAN).view(1, -1, 1, 1), torch.tensor(STD).view(1, -1, 1, 1)
    assert torch.equal(((out * std + mean) * 255).round().to(torch.uint8), x)


@pytest.mark.parametrize(("n", "batch_size", "train_len", "val_len"), [(20, 8, 2, 3), (16, 8, 2, 2), (3, 8, 1, 1)])
def test_len_follows_drop_last(n: int, batch_size: int, train_len: int, val_len: int) -> None:
    x, y = torch.rand(n, 2, 4, 4), torch.arange(n)
    train = DeviceLoader(x, y, batch_size=batch_size, mean=MEAN, std=STD, train=True)
    val = DeviceLoader(x, y, batch_size=batch_size, mean=MEAN, std=STD, train=False)
    assert len(train) == train_len == len(_batches(train))
    assert len(val) == val_len == len(_batches(val))
    assert {xb.shape[0] for xb, _ in train} == {min(batch_size, n)}  # constant training shapes
    assert sum(xb.shape[0] for xb, _ in val) == n
    assert torch.equal(torch.cat([yb for _, yb in val]), y)  # validation keeps order


def test_validation_ignores_augmentation() -> None:
    loader = _loader(train=False, crop_padding=2, flip=True)
    assert loader.crop_padding == 0 and loader.flip is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_iteration_never_syncs() -> None:
    x, y = _images(64)
    loader = DeviceLoader(x.cuda(), y.cuda(), batch_size=16, mean=MEAN, std=STD, train=True, crop_padding=2, flip=True)
    list(loader)  # warm up lazy CUDA state, which may sync once
    torch.cuda.set_sync_debug_mode("error")
    try:
        for xb, yb in loader:
            assert xb.is_cuda and yb.is_cuda
    finally:
        torch.cuda.set_sync_debug_mode("default")
