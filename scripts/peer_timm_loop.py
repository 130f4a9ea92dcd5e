"""A digits cell trained by normbench's `train_cell` against the same cell in a plain, hand-written timm loop
(timm's VisionTransformer with the same dims, torch's AdamW with its defaults, a Python loop over tensors), timed
interleaved: peer, normbench fast path, normbench plain path (`NORMBENCH_FASTPATH=0`, the code before the fast
path), repeated. Prints each repeat and the median ratios with their spread, of wall time and of the process's CPU
time (with one thread, CPU time is what a busy neighbour disturbs least); writes a markdown file to results/.

    OMP_NUM_THREADS=1 python scripts/peer_timm_loop.py [--repeats 5] [--epochs 2] [--depth 12]

The recipe is suites/depth-sweep-digits.yaml's (dim 64, 4 heads, patch 2, batch 64, AdamW lr 1e-3, weight decay
0.05 off norms/biases/embeddings, 1 warmup epoch then cosine, label smoothing 0.1, grad clip 1.0, one validation
pass per epoch), with layernorm, the layer timm's ViT has.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import timm
import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.data.digits import load_digits_splits
from normbench.train import fastpath
from normbench.train.loop import train_cell
from normbench.train.schedule import warmup_cosine

DIM, HEADS, PATCH, BATCH, LR, WD, SMOOTHING = 64, 4, 2, 64, 1e-3, 0.05, 0.1


def normbench_cell(depth: int, epochs: int) -> CellConfig:
    return CellConfig(model=ModelConfig(layer="layernorm", depth=depth, embed_dim=DIM, num_heads=HEADS,
                                        patch_size=PATCH),
                      train=TrainConfig(epochs=epochs, batch_size=BATCH, lr=LR, weight_decay=WD, warmup_epochs=1,
                                        label_smoothing=SMOOTHING, clip_grad=1.0))


def peer_cell(depth: int, epochs: int, seed: int = 0) -> float:
    """The plain loop a researcher would write; returns the last validation accuracy (percent)."""
    torch.manual_seed(seed)
    s = load_digits_splits()
    mean, std = s.mean[0], s.std[0]
    train_x, val_x = (s.train_x.float() - mean) / std, (s.val_x.float() - mean) / std  # float [0, 1] pixels
    model = VisionTransformer(img_size=8, patch_size=PATCH, in_chans=1, num_classes=s.num_classes, embed_dim=DIM,
                              depth=depth, num_heads=HEADS)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and n not in ("pos_embed", "cls_token")]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and n not in ("pos_embed", "cls_token"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=SMOOTHING)
    steps_per_epoch = len(train_x) // BATCH
    total, step, acc = steps_per_epoch * epochs, 0, 0.0
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(train_x))
        for i in range(steps_per_epoch):
            idx = order[i * BATCH:(i + 1) * BATCH]
            for g in opt.param_groups:
                g["lr"] = warmup_cosine(step, total_steps=total, warmup_steps=steps_per_epoch, lr=LR, warmup_lr=1e-6,
                                        min_lr=1e-6)
            loss = loss_fn(model(train_x[idx]), s.train_y[idx])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
        model.eval()
        with torch.no_grad():
            correct = sum((model(val_x[i:i + BATCH]).argmax(-1) == s.val_y[i:i + BATCH]).sum().item()
                          for i in range(0, len(val_x), BATCH))
        acc = 100.0 * correct / len(val_x)
    return acc


def normbench_run(depth: int, epochs: int, fast: bool) -> float:
    os.environ[fastpath.ENV_SWITCH] = "1" if fast else "0"
    try:
        return train_cell(normbench_cell(depth, epochs), device="cpu").final_val_top1
    finally:
        os.environ.pop(fastpath.ENV_SWITCH, None)


def timed(fn, *args) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of this process, the cell's accuracy)."""
    t0, c0 = time.perf_counter(), time.process_time()
    acc = fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0, acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    load = os.getloadavg()[0]
    runs = {"peer": lambda: timed(peer_cell, args.depth, args.epochs),
            "normbench": lambda: timed(normbench_run, args.depth, args.epochs, True),
            "normbench_plain": lambda: timed(normbench_run, args.depth, args.epochs, False)}
    for run in runs.values():  # warm-up: imports, the digits cache, allocator
        run()
    lines, secs, cpu = [], {name: [] for name in runs}, {name: [] for name in runs}
    for r in range(args.repeats):
        row = {name: run() for name, run in runs.items()}
        for name, (sec, cpu_sec, _) in row.items():
            secs[name].append(sec)
            cpu[name].append(cpu_sec)
        line = (f"repeat {r}: " + ", ".join(f"{n} {sec:.2f} s wall {c:.2f} s cpu ({acc:.1f}%)"
                                            for n, (sec, c, acc) in row.items())
                + f"; normbench/peer {row['normbench'][0] / row['peer'][0]:.3f}, plain/peer "
                f"{row['normbench_plain'][0] / row['peer'][0]:.3f}")
        print(line, flush=True)
        lines.append(line)
    summary = []
    for clock, table in (("wall", secs), ("cpu", cpu)):
        for name in ("normbench", "normbench_plain"):
            ratios = [a / b for a, b in zip(table[name], table["peer"], strict=True)]
            summary.append(f"{name} / peer, {clock} time: median {statistics.median(ratios):.3f} (min "
                           f"{min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} interleaved repeats")
    summary.append("median wall seconds: " + ", ".join(f"{n} {statistics.median(s):.2f}" for n, s in secs.items()))
    summary.append("median cpu seconds: " + ", ".join(f"{n} {statistics.median(s):.2f}" for n, s in cpu.items()))
    print("\n".join(summary))
    header = (f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.platform()}, {os.cpu_count()} CPUs, "
              f"{platform.processor() or platform.machine()}, load average {load:.1f} at start; torch "
              f"{torch.__version__}, timm {timm.__version__}, torch threads {torch.get_num_threads()}; digits, depth "
              f"{args.depth}, dim {DIM}, batch {BATCH}, {args.epochs} epochs per cell")
    version = torch.__version__.split("+")[0]
    path = args.out / f"peer-timm-loop-cpu-{version}.md"
    args.out.mkdir(parents=True, exist_ok=True)
    threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    path.write_text("# normbench cell vs a plain timm loop\n\n" + header + f"\n\n`{threads}"
                    f"python scripts/peer_timm_loop.py --depth {args.depth} "
                    f"--epochs {args.epochs} --repeats {args.repeats}`\n\n"
                    + "\n".join(f"- {s}" for s in summary) + "\n\n```\n" + "\n".join(lines) + "\n```\n",
                    encoding="utf-8")
    print(f"wrote {path}")
    if not math.isfinite(statistics.median(secs["normbench"])):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
