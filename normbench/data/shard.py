"""A rank's share of every batch, for one cell trained over several processes (see normbench/train/distributed.py).

Each rank keeps elements `rank, rank + world, ...` of the global batch that a single process would draw, so N
processes together see exactly the single-process batches. Device-resident sets slice each batch after drawing it
(indexing and augmenting on the GPU is cheap); imagefolder shards its sampler instead, so each rank decodes only
its own images.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from torch import Tensor
from torch.utils.data import Sampler

from normbench.data.bundle import Loader

T = TypeVar("T")


class ShardedLoader:
    """Wraps a loader; yields this rank's slice of each of its batches."""

    def __init__(self, loader: Loader, rank: int, world: int) -> None:
        self.loader, self.rank, self.world = loader, rank, world

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def position(self) -> Tensor | None:
        return self.loader.position()  # type: ignore[attr-defined]

    def resume_at(self, batch: int, generator_state: Tensor | None) -> None:
        self.loader.resume_at(batch, generator_state)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for x, y in self.loader:
            yield x[self.rank :: self.world], y[self.rank :: self.world]


def shard_batches(items: Iterable[T], batch_size: int, rank: int, world: int, drop_last: bool) -> Iterator[T]:
    """This rank's elements of each consecutive batch of `batch_size` items."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == batch_size:
            yield from batch[rank::world]
            batch = []
    if batch and not drop_last:
        yield from batch[rank::world]


class ShardedSampler(Sampler[T]):
    """A sampler's output cut into global batches, of which this rank keeps its slice (last partial batch dropped).
    Use it with a DataLoader whose batch_size is `batch_size // world`."""

    def __init__(self, base: Sampler[T], batch_size: int, rank: int, world: int) -> None:
        self.base, self.batch_size, self.rank, self.world = base, batch_size, rank, world

    def __iter__(self) -> Iterator[T]:
        return shard_batches(self.base, self.batch_size, self.rank, self.world, drop_last=True)

    def __len__(self) -> int:
        return len(self.base) // self.batch_size * (self.batch_size // self.world)  # type: ignore[arg-type]
