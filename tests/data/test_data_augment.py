from __future__ import annotations

import torch
import torch.nn.functional as F

from normbench.data.augment import random_crop, random_flip, resize_images


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_crop_is_a_window_of_the_padded_image() -> None:
    x = torch.randint(1, 256, (32, 3, 6, 5), dtype=torch.uint8)  # no zeros, so padding is recognizable
    out = random_crop(x, 2, _gen())
    assert out.shape == x.shape and out.dtype == torch.uint8
    padded = F.pad(x, (2, 2, 2, 2))
    offsets = set()
    for i in range(len(x)):
        matches = [
            (dy, dx)
            for dy in range(5)
            for dx in range(5)
            if torch.equal(out[i], padded[i, :, dy : dy + 6, dx : dx + 5])
        ]
        assert matches, f"sample {i} is not a window of its padded image"
        offsets.update(matches)
    assert len(offsets) > 5  # offsets vary per sample
    assert (out == 0).any()  # some windows reach into the padding


def test_crop_without_padding_is_identity() -> None:
    x = torch.rand(4, 1, 5, 5)
    assert random_crop(x, 0, _gen()) is x


def test_flip_mirrors_some_samples_only() -> None:
    x = torch.rand(64, 2, 4, 4)
    out = random_flip(x, _gen())
    flipped = torch.tensor([torch.equal(o, xi.flip(-1)) for o, xi in zip(out, x, strict=True)])
    kept = torch.tensor([torch.equal(o, xi) for o, xi in zip(out, x, strict=True)])
    assert bool((flipped | kept).all())
    assert 10 < int(flipped.sum()) < 54


def test_resize_keeps_dtype_and_constants() -> None:
    x = torch.full((3, 3, 8, 8), 77, dtype=torch.uint8)
    up = resize_images(x, 16)
    down = resize_images(x, 4, chunk=2)
    assert up.shape == (3, 3, 16, 16) and up.dtype == torch.uint8 and bool((up == 77).all())
    assert down.shape == (3, 3, 4, 4) and bool((down == 77).all())
    y = torch.rand(2, 1, 8, 8)
    assert resize_images(y, 8) is y
    assert resize_images(y, 12).dtype == torch.float32
