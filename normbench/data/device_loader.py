"""A loader over a split that lives entirely on the device: index, augment and normalize whole batches there."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from normbench.data.augment import random_crop, random_flip
from normbench.data.seeding import epoch_seed


class DeviceLoader:
    """Batches from device-resident tensors, with on-device random crop and flip for training.

    Iteration never syncs with the host, and its batch shapes are constant for training (good for torch.compile).
    Shuffling and augmentation are drawn from a generator on the data's device seeded from (seed, epoch): iterating
    twice at the same epoch gives the same batches, so call `set_epoch` each epoch (as with DistributedSampler).

    Args:
        images: (N, C, H, W) uint8 in [0, 255] or float in [0, 1], already on the target device.
        labels: (N,) int64 on the same device.
        batch_size: Samples per batch; for training, capped at N so a tiny set still gives one batch.
        mean: Per-channel mean of the [0, 1] pixel values, length C.
        std: Per-channel standard deviation, length C.
        train: True shuffles, augments and drops the last partial batch; False does none of these.
        seed: Run seed mixed with the epoch (default 0).
        crop_padding: Zero padding for random crops, in pixels (default 0 = no crop); training only.
        flip: Random horizontal flips (default False); training only.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        *,
        batch_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        train: bool,
        seed: int = 0,
        crop_padding: int = 0,
        flip: bool = False,
    ) -> None:
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
        if len(mean) != images.shape[1] or len(std) != images.shape[1]:
            raise ValueError(f"mean/std need {images.shape[1]} channels, got {len(mean)}/{len(std)}")
        self.images = images
        self.labels = labels.long()
        self.num_samples = int(images.shape[0])
        self.batch_size = min(batch_size, self.num_samples) if train else batch_size
        self.train = train
        self.seed = seed
        self.epoch = 0
        self.crop_padding = crop_padding if train else 0
        self.flip = flip and train
        # x_norm = x_raw * scale + shift folds the /255 and (x - mean) / std into one multiply-add
        pixel = 1.0 / 255.0 if images.dtype == torch.uint8 else 1.0
        std_t = torch.tensor(std, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
        mean_t = torch.tensor(mean, dtype=torch.float32, device=images.device).view(1, -1, 1, 1)
        self._scale = pixel / std_t
        self._shift = -mean_t / std_t
        self._before_batch: Tensor | None = None  # the pass's generator state before its last batch's draws
        self._resume: tuple[int, Tensor] | None = None  # (first batch, generator state) of the next pass

    @property
    def device(self) -> torch.device:
        return self.images.device

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle order and augmentation draws of `epoch` (no effect on validation)."""
        self.epoch = int(epoch)

    def position(self) -> Tensor | None:
        """During a training pass: its generator's state before the draws of the batch it yielded last (a host-side
        copy, no device sync). With that batch's index it is what a checkpoint keeps to redo the pass from there
        bit for bit: `resume_at(index, position())`. None before any pass."""
        return self._before_batch

    def resume_at(self, batch: int, generator_state: Tensor | None) -> None:
        """Make the next training pass of the current epoch start at `batch`, its draws continuing from
        `generator_state` (the `position()` read while batch `batch` of the same epoch was the last yielded)."""
        if generator_state is None:
            raise ValueError("resuming a pass mid-epoch needs the generator state its checkpoint kept")
        self._resume = (int(batch), generator_state)

    def __len__(self) -> int:
        if self.train:
            return self.num_samples // self.batch_size
        return -(-self.num_samples // self.batch_size)

    def normalize(self, x: Tensor) -> Tensor:
        """Raw (B, C, H, W) pixels -> float32 normalized with this loader's mean/std."""
        return torch.addcmul(self._shift, x.float(), self._scale)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        if not self.train:
            for start in range(0, self.num_samples, self.batch_size):
                stop = start + self.batch_size
                yield self.normalize(self.images[start:stop]), self.labels[start:stop]
            return
        # a fresh generator per pass, so concurrent iterators cannot disturb each other's draws
        generator = torch.Generator(device=self.device)
        generator.manual_seed(epoch_seed(self.seed, self.epoch))
        order = torch.randperm(self.num_samples, generator=generator, device=self.device)
        start, self._resume = (self._resume or (0, None)), None
        if start[1] is not None:  # a checkpoint's pass: the same order, the draws from where it stopped
            generator.set_state(start[1])
        for i in range(start[0], len(self)):
            self._before_batch = generator.get_state()
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            x = self.images.index_select(0, idx)
            x = random_crop(x, self.crop_padding, generator)
            if self.flip:
                x = random_flip(x, generator)
            yield self.normalize(x), self.labels.index_select(0, idx)
