"""What a cell's checkpoint costs (issue 39): its size, the time to write it (capture + atomic write) and to read it
back, at depths 12/36 and widths 64/192, and the overhead at the default interval (`train.checkpoint_minutes`).

    .venv/bin/python scripts/bench_checkpoint.py                       # CPU, writes into a temporary folder
    .venv/bin/python scripts/bench_checkpoint.py --device cuda --dir /shared/scratch/ckpt   # a cluster's filesystem

Each model is an AdamW cell (the default recipe: its optimizer holds two moments per weight) after one trained
epoch of digits (so the optimizer state, telemetry and history exist); the image and patch only change the position
embedding. The overhead is the write time over the interval: one checkpoint per `checkpoint_minutes` of training,
and the writes a 30-minute cell makes (one at each interval that ends before its last epoch) over its 30 minutes.
Writes results/checkpoint-cost/checkpoint-cost-<device>-torch<version>.md and .csv, with the machine and versions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig  # noqa: E402
from normbench.diagnostics.bench import device_slug, torch_version  # noqa: E402
from normbench.report.machine import load_note, machine_line  # noqa: E402
from normbench.train import checkpoint  # noqa: E402
from normbench.train.loop import build_fit, train_epoch  # noqa: E402

DEFAULT_MINUTES = TrainConfig.checkpoint_minutes
CELL_MINUTES = 30.0  # the yardstick: the overhead on a 30-minute cell
HEADS = {64: 4, 192: 3}  # DeiT-Tiny's 3 heads at 192; 4 heads of 16 at 64 (normbench's digits default)


def measure(depth: int, width: int, device: str, folder: Path, repeats: int) -> dict[str, object]:
    config = CellConfig(model=ModelConfig(layer="layerscale", depth=depth, embed_dim=width,
                                          num_heads=HEADS.get(width, 4), patch_size=2),
                        train=TrainConfig(epochs=1, batch_size=64, warmup_epochs=0, compile="off"))
    fit = build_fit(config, device, None, None)
    train_epoch(fit, 0)
    fit.progress.next_epoch = 1
    keeper = checkpoint.Keeper(path=folder / f"d{depth}-w{width}" / "checkpoint.pt",
                               recipe=checkpoint.recipe_of(config), interval_s=60 * DEFAULT_MINUTES)
    writes, reads = [], []
    for _ in range(repeats):
        if fit.dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        assert keeper.save(fit)
        writes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        checkpoint.read(keeper.path, keeper.recipe)
        reads.append(time.perf_counter() - t0)
    write_s = statistics.median(writes)
    in_cell = int(CELL_MINUTES // DEFAULT_MINUTES)  # the writes of a 30-minute cell (at most)
    return {"depth": depth, "width": width, "params_M": sum(p.numel() for p in fit.model.parameters()) / 1e6,
            "size_MB": keeper.path.stat().st_size / 1e6, "write_s": write_s, "write_max_s": max(writes),
            "read_s": statistics.median(reads),
            "overhead_pct_per_interval": 100 * write_s / (60 * DEFAULT_MINUTES),
            "overhead_pct_30min_cell": 100 * in_cell * write_s / (60 * CELL_MINUTES)}


def _filesystem(path: Path) -> str:
    """The filesystem type `path` is on (from /proc/mounts), or 'filesystem unknown'."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "filesystem unknown"
    resolved = str(path.resolve())
    best = max((m for m in mounts if len(m) > 2 and (resolved + "/").startswith(m[1].rstrip("/") + "/")),
               key=lambda m: len(m[1]), default=None)
    return f"{best[2]} on {best[0]}" if best else "filesystem unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--depth", type=int, nargs="+", default=[12, 36])
    parser.add_argument("--width", type=int, nargs="+", default=[64, 192])
    parser.add_argument("--repeats", type=int, default=5, help="writes per model (the median is reported)")
    parser.add_argument("--dir", type=Path, help="where to write the checkpoints (default: a temporary folder; pass "
                        "the filesystem your --checkpoint-dir is on to measure that)")
    parser.add_argument("--out", type=Path, default=Path("results/checkpoint-cost"))
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    dev = torch.device(args.device)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [measure(d, w, args.device, Path(tmp), args.repeats) for d in args.depth for w in args.width]
    frame = pd.DataFrame(rows)
    machine = machine_line(dev) + load_note()
    frame.insert(0, "machine", machine)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"checkpoint-cost-{device_slug(dev)}-torch{torch_version()}"
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    where = args.dir or Path(tempfile.gettempdir())
    table = frame.drop(columns=["machine"]).to_markdown(index=False, floatfmt=".3g")
    text = "\n".join([
        f"# Checkpoint cost on {device_slug(dev)}", "",
        f"`python scripts/bench_checkpoint.py {' '.join(sys.argv[1:])}`".replace(" `", "`"), "",
        f"- {machine}", f"- written to {where} ({_filesystem(where)}); median of {args.repeats} writes (capture + "
        "temp file + fsync + rename) and reads; a shared filesystem (NFS, Lustre) is slower: pass --dir to measure it",
        "",
        f"An AdamW layerscale cell after one epoch; `train.checkpoint_minutes` default {DEFAULT_MINUTES:g}: "
        f"`overhead_pct_per_interval` is one write per {DEFAULT_MINUTES:g} minutes of training, "
        f"`overhead_pct_30min_cell` the {int(CELL_MINUTES // DEFAULT_MINUTES)} write(s) a {CELL_MINUTES:g}-minute "
        "cell makes, over its 30 minutes.", "", table, ""])
    stem.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    print(stem.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
