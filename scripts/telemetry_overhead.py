"""Telemetry's cost: the same cell with `train.telemetry_every` = N against 0, interleaved in pairs (order alternating).

    PYTHONPATH=$PWD python scripts/telemetry_overhead.py --pairs 3 --epochs 4 --every 25

The cell is suites/depth-sweep-digits.yaml's recipe at depth 12 (layernorm unless --layer). Prints each pair's
cell seconds and training images/s, and the median on/off ratios.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from normbench.config import CellConfig, ModelConfig, TrainConfig
from normbench.train import train_cell


def cell(every: int, args: argparse.Namespace) -> CellConfig:
    return CellConfig(model=ModelConfig(layer=args.layer, depth=args.depth, embed_dim=64, num_heads=4, patch_size=2),
                      train=TrainConfig(epochs=args.epochs, batch_size=64, warmup_epochs=1, weight_decay=0.05,
                                        lr=1e-3, telemetry_every=every))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--layer", default="layernorm")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seconds, speed = [], []
    for pair in range(args.pairs):
        order = (args.every, 0) if pair % 2 == 0 else (0, args.every)
        runs = {every: train_cell(cell(every, args), device=args.device) for every in order}
        on, off = runs[args.every], runs[0]
        seconds.append(on["seconds"] / off["seconds"])
        speed.append(off["images_per_sec"] / on["images_per_sec"])
        print(f"pair {pair} ({'on first' if order[0] else 'off first'}): cell s on {on['seconds']:.2f} off "
              f"{off['seconds']:.2f} (x{seconds[-1]:.3f}); train img/s on {on['images_per_sec']:.0f} off "
              f"{off['images_per_sec']:.0f} (time x{speed[-1]:.3f}); samples kept {len(on['telemetry'])}", flush=True)
    print(f"median time ratio on/off: cell {statistics.median(seconds):.3f}, training steps "
          f"{statistics.median(speed):.3f} (telemetry_every={args.every}, {args.pairs} pairs, depth {args.depth}, "
          f"{args.epochs} epochs, {args.layer})")


if __name__ == "__main__":
    main()
