"""Telemetry's cost: the same cell with `train.telemetry_every` = N against 0, interleaved in pairs (order alternating).

    PYTHONPATH=$PWD python scripts/telemetry_overhead.py --pairs 3 --epochs 4 --every 25

The cell is suites/depth-sweep-digits.yaml's recipe at depth 12 (layernorm unless --layer). Prints each pair's
cell seconds and training images/s, and the median on/off ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

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
    seconds, speed, cpu = [], [], []
    for pair in range(args.pairs):
        order = (args.every, 0) if pair % 2 == 0 else (0, args.every)
        runs = {}
        for every in order:
            started = time.process_time()  # this process's CPU time: less swayed by other load than the wall clock
            runs[every] = train_cell(cell(every, args), device=args.device)
            runs[every]["cpu_seconds"] = time.process_time() - started
        on, off = runs[args.every], runs[0]
        seconds.append(on["seconds"] / off["seconds"])
        speed.append(off["images_per_sec"] / on["images_per_sec"])
        cpu.append(on["cpu_seconds"] / off["cpu_seconds"])
        print(f"pair {pair} ({'on first' if order[0] else 'off first'}): cell wall s on {on['seconds']:.2f} off "
              f"{off['seconds']:.2f} (x{seconds[-1]:.3f}); cell CPU s on {on['cpu_seconds']:.2f} off "
              f"{off['cpu_seconds']:.2f} (x{cpu[-1]:.3f}); train img/s on {on['images_per_sec']:.0f} off "
              f"{off['images_per_sec']:.0f} (time x{speed[-1]:.3f}); observed steps kept "
              f"{len({r['step'] for r in on['telemetry']})}", flush=True)
    print(f"median on/off: cell wall {statistics.median(seconds):.3f}, cell CPU {statistics.median(cpu):.3f}, "
          f"training steps (wall) {statistics.median(speed):.3f} (telemetry_every={args.every}, {args.pairs} pairs, "
          f"depth {args.depth}, {args.epochs} epochs, {args.layer}, {args.threads} thread(s))")


if __name__ == "__main__":
    main()
