"""Telemetry's cost: the same cell with `train.telemetry_every` = N against 0, interleaved in pairs (order alternating).

    PYTHONPATH=$PWD python scripts/telemetry_overhead.py --pairs 3 --epochs 4 --every 25

The cell is suites/depth-sweep-digits.yaml's recipe at depth 12 (layernorm unless --layer). Prints each pair's
cell seconds (wall and this process's CPU) and training images/s, and the median on/off ratios. With --step-pairs,
first times single optimizer steps of the same model, observed against plain, interleaved: the extra cost of one
observed step in plain steps, which divided by `every` is the overhead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.loop import train_cell


def cell(every: int, args: argparse.Namespace) -> CellConfig:
    return CellConfig(model=ModelConfig(layer=args.layer, depth=args.depth, embed_dim=64, num_heads=4, patch_size=2),
                      train=TrainConfig(epochs=args.epochs, batch_size=64, warmup_epochs=1, weight_decay=0.05,
                                        lr=1e-3, telemetry_every=every))


def step_costs(args: argparse.Namespace) -> None:
    from torch import nn

    from normbench.model.vit import NormbenchViT
    from normbench.train.telemetry import BlockTelemetry

    torch.manual_seed(0)
    model = NormbenchViT(img_size=8, patch_size=2, in_chans=1, num_classes=10, embed_dim=64, depth=args.depth,
                         num_heads=4, layer=args.layer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    telemetry = BlockTelemetry(model)
    x, y = torch.randn(64, 1, 8, 8), torch.randint(0, 10, (64,))

    def step(observed: bool) -> float:
        started = time.process_time()
        with telemetry.observe() if observed else nullcontext():
            nn.functional.cross_entropy(model(x), y).backward()
        if observed:
            telemetry.before_update()
        nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
        optimizer.step()
        if observed:
            telemetry.after_update(0)
            telemetry.collect()
        optimizer.zero_grad(set_to_none=True)
        return time.process_time() - started

    for _ in range(3):
        step(False), step(True)
    plain, observed = [], []
    for _ in range(args.step_pairs):
        plain.append(step(False))
        observed.append(step(True))
    extra = statistics.median(observed) / statistics.median(plain) - 1
    print(f"one step (CPU time, median of {args.step_pairs}): plain {1e3 * statistics.median(plain):.1f} ms, observed "
          f"{1e3 * statistics.median(observed):.1f} ms: +{extra:.3f} steps; overhead at every = 10 / 25 / 50: "
          f"{100 * extra / 10:.2f}% / {100 * extra / 25:.2f}% / {100 * extra / 50:.2f}%", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--layer", default="layernorm")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--step-pairs", type=int, default=0, help="first time this many single-step pairs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.step_pairs:
        step_costs(args)
    if not args.pairs:
        return
    warmup = cell(0, args)
    warmup.train.epochs = 1
    train_cell(warmup, device=args.device)  # one-time costs (imports, data, allocator) would fall on the first cell
    seconds, speed, cpu = [], [], []
    for pair in range(args.pairs):
        order = (args.every, 0) if pair % 2 == 0 else (0, args.every)
        runs, cpu_seconds = {}, {}
        for every in order:
            started = time.process_time()  # this process's CPU time: less swayed by other load than the wall clock
            runs[every] = train_cell(cell(every, args), device=args.device)
            cpu_seconds[every] = time.process_time() - started
        on, off = runs[args.every], runs[0]
        on_cpu, off_cpu = cpu_seconds[args.every], cpu_seconds[0]
        seconds.append(on.seconds / off.seconds)
        speed.append(off.images_per_sec / on.images_per_sec)
        cpu.append(on_cpu / off_cpu)
        print(f"pair {pair} ({'on first' if order[0] else 'off first'}): cell wall s on {on.seconds:.2f} off "
              f"{off.seconds:.2f} (x{seconds[-1]:.3f}); cell CPU s on {on_cpu:.2f} off "
              f"{off_cpu:.2f} (x{cpu[-1]:.3f}); train img/s on {on.images_per_sec:.0f} off "
              f"{off.images_per_sec:.0f} (time x{speed[-1]:.3f}); observed steps kept "
              f"{len({r['step'] for r in on.telemetry})}", flush=True)
    print(f"median on/off: cell wall {statistics.median(seconds):.3f}, cell CPU {statistics.median(cpu):.3f}, "
          f"training steps (wall) {statistics.median(speed):.3f} (telemetry_every={args.every}, {args.pairs} pairs, "
          f"depth {args.depth}, {args.epochs} epochs, {args.layer}, {args.threads} thread(s))")


if __name__ == "__main__":
    main()
