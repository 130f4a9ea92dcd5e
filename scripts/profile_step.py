"""Where a digits cell's time goes: torch.profiler around `train_cell` on the depth-sweep-digits recipe
(depth 12, dim 64, 4 heads, patch 2 -> 17 tokens, batch 64), top ops by self CPU time.

    OMP_NUM_THREADS=1 python scripts/profile_step.py [--layer layernorm] [--epochs 2] [--rows 25]
    NORMBENCH_FASTPATH=0 python scripts/profile_step.py     # the plain path, for a before/after
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.loop import train_cell


def digits_cell(layer: str, depth: int, epochs: int) -> CellConfig:
    """suites/depth-sweep-digits.yaml's recipe for one (layer, depth) at lr 1e-3, seed 0."""
    return CellConfig(model=ModelConfig(layer=layer, depth=depth, embed_dim=64, num_heads=4, patch_size=2),
                      train=TrainConfig(epochs=epochs, batch_size=64, warmup_epochs=1, weight_decay=0.05, lr=1e-3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layer", default="layernorm")
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    cell = digits_cell(args.layer, args.depth, args.epochs)
    train_cell(digits_cell(args.layer, args.depth, 1), device="cpu")  # warm-up: imports, allocator, caches
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = train_cell(cell, device="cpu")
    print(f"threads {torch.get_num_threads()}, {result.seconds:.2f} s, {result.images_per_sec:.0f} img/s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
