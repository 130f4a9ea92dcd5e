"""Sharding for one cell over several processes: the ranks' slices of each batch are disjoint and together make
exactly the batch a single process draws."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from normbench.data import DataConfig, build_data
from normbench.data.shard import ShardedSampler, shard_batches
from normbench.errors import SuiteError
from tests.data.test_data_imagefolder import _cfg, _fake_folder


def test_shard_batches_partition_every_batch():
    items = list(range(10))
    ranks = [list(shard_batches(items, 4, rank, 2, drop_last=True)) for rank in (0, 1)]
    assert ranks == [[0, 2, 4, 6], [1, 3, 5, 7]]  # batches [0..3], [4..7]; the partial [8, 9] is dropped
    assert list(shard_batches(items, 4, 1, 2, drop_last=False)) == [1, 3, 5, 7, 9]


def test_sharded_sampler_length_matches_what_it_yields():
    sampler = ShardedSampler(range(11), batch_size=6, rank=2, world=3)  # type: ignore[arg-type]
    assert list(sampler) == [2, 5] and len(sampler) == 2


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_device_loader_shards_make_up_the_single_process_batches(split):
    def batches(shard):
        bundle = build_data(DataConfig(name="digits"), batch_size=64, device="cpu", seed=1, shard=shard)
        loader = getattr(bundle, split)
        loader.set_epoch(2)
        return list(loader)

    whole, rank0, rank1 = batches((0, 1)), batches((0, 2)), batches((1, 2))
    assert len(whole) == len(rank0) == len(rank1)
    for (x, y), (x0, y0), (x1, y1) in zip(whole, rank0, rank1, strict=True):
        assert torch.equal(x[0::2], x0) and torch.equal(x[1::2], x1)
        assert torch.equal(y[0::2], y0) and torch.equal(y[1::2], y1)


def test_imagefolder_ranks_decode_disjoint_halves_of_each_batch(tmp_path: Path):
    root = _fake_folder(tmp_path, train_per_class=5, val_per_class=3)  # train/: 8 train + 2 held out as val

    def labels(shard, split):
        bundle = build_data(_cfg(root, val_fraction=0.2), batch_size=4, device="cpu", img_size=8, seed=0, shard=shard)
        loader = getattr(bundle, split)
        loader.set_epoch(1)
        return [(x.shape[0], y.tolist()) for x, y in loader]

    whole = labels((0, 1), "train")
    halves = [labels((rank, 2), "train") for rank in (0, 1)]
    assert [n for n, _ in halves[0]] == [2, 2] and len(whole) == 2
    for (_, y), (_, y0), (_, y1) in zip(whole, *halves, strict=True):
        assert y[0::2] == y0 and y[1::2] == y1
    test = [sum((y for _, y in labels((rank, 2), "test")), []) for rank in (0, 1)]
    assert sorted(test[0] + test[1]) == [0, 0, 0, 1, 1, 1]  # every test image once across the ranks
    val = [sum((y for _, y in labels((rank, 2), "val")), []) for rank in (0, 1)]
    assert sorted(val[0] + val[1]) == [0, 1]


def test_batch_size_must_split_over_the_processes():
    with pytest.raises(SuiteError, match="batch_size"):
        build_data(DataConfig(name="digits"), batch_size=63, device="cpu", shard=(0, 2))


def test_a_train_set_smaller_than_the_batch_must_still_split():
    # digits has 1077 train images: a batch of 2000 is capped at 1077, which two processes cannot share evenly
    with pytest.raises(SuiteError, match="1077"):
        build_data(DataConfig(name="digits"), batch_size=2000, device="cpu", shard=(0, 2))
