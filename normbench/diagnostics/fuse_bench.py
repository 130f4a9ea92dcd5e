"""`normbench bench SUITE --fuse 1 4 16 64`: cells per hour trained fused (train/fused.py) against one by one, on the
same device, at the suite's own shape and recipe.

Per (depth, layer) row of the suite, K members (the row's lrs and seeds, cycled) train one epoch as one fused model;
the unfused reference trains one of them alone for one epoch, as a worker does cell after cell. After one untimed
round, the sizes are timed interleaved, round after round (1 4 16 ... 1 4 16 ...), so a loaded machine's drift hits
them alike; the median of `repeats` rounds is reported. An epoch here is the cell's own (its data, evaluation
included), so cells per hour is `3600 x K / (seconds per fused epoch x the suite's epochs)`. Memory is the CUDA peak;
on a CPU it is not measured.

Writes `fuse-<device>-<torch>.csv` and `.md` into the output folder, beside the suite's cost file, after each row
(a lease's time limit that interrupts the bench keeps the rows it measured).
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from normbench.contracts.recipe import CellConfig
from normbench.contracts.suite import Suite
from normbench.diagnostics.bench import device_slug, torch_version
from normbench.diagnostics.suite_cost import cost_configs
from normbench.report.machine import machine_line
from normbench.report.tables import markdown_table
from normbench.train.device import resolve_device
from normbench.train.fused import train_group
from normbench.train.fusion_rules import refusal
from normbench.train.loop import train_cell

COLUMNS = ["suite", "layer", "depth", "dim", "batch", "group", "epoch_s", "cells_per_hour", "speedup_vs_unfused",
           "peak_mib", "device", "torch"]


def member_cells(suite: Suite, depth: int, layer: str, k: int) -> list[CellConfig]:
    """K one-epoch recipes of the row, its lrs and seeds cycled (members may differ in nothing else)."""
    row = [c.config for c in suite.cells() if c.config.model.depth == depth and c.config.model.layer == layer]
    one_epoch = [dataclasses.replace(c, train=dataclasses.replace(c.train, epochs=1, checkpoint_minutes=0.0))
                 for c in row]
    return [one_epoch[i % len(one_epoch)] for i in range(k)]


def _timed(fn, dev: torch.device) -> tuple[float, float]:  # noqa: ANN001 - a no-argument callable
    """(seconds, CUDA peak MiB or NaN) of `fn()`."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    started = time.perf_counter()
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        return time.perf_counter() - started, torch.cuda.max_memory_allocated(dev) / 2**20
    return time.perf_counter() - started, float("nan")


def fuse_bench(suite: Suite, out_dir: Path, sizes: list[int], *, depths: list[int] | None = None,
               layers: list[str] | None = None, device: str = "auto", repeats: int = 3) -> Path:
    """Time each row fused at each size in `sizes` against unfused; write the tables; returns the .md path."""
    dev = resolve_device(device)
    rows = []
    for depth, layer in cost_configs(suite, depths, layers):
        cells = member_cells(suite, depth, layer, max(sizes))
        if (reason := refusal(cells, dev)) is not None:
            print(f"normbench: bench --fuse: {layer} at depth {depth} is not fused ({reason})", file=sys.stderr)
            continue
        unfused: list[float] = []
        fused: dict[int, list[tuple[float, float]]] = {k: [] for k in sizes}
        train_cell(cells[0], dev)  # warm-up, untimed: the data set's first load, the allocator's first blocks
        train_group(cells[:min(sizes)], dev)
        for _ in range(repeats):
            unfused.append(_timed(lambda c=cells: train_cell(c[0], dev), dev)[0])
            for k in sizes:
                fused[k].append(_timed(lambda k=k, c=cells: train_group(c[:k], dev), dev))
        alone_s = statistics.median(unfused)
        epochs = suite.cells()[0].config.train.epochs
        rows.append(_row(suite, cells[0], 1, alone_s, alone_s, float("nan"), epochs, dev, unfused=True))
        for k in sizes:
            epoch_s = statistics.median(s for s, _ in fused[k])
            peak = max(m for _, m in fused[k])
            rows.append(_row(suite, cells[0], k, epoch_s, alone_s, peak, epochs, dev))
        print(f"normbench: bench --fuse: {layer} depth {depth}: " + ", ".join(
            f"K={r['group']} {r['speedup_vs_unfused']:.2f}x" for r in rows[-len(sizes):]), file=sys.stderr)
        _write(suite, out_dir, rows, dev, repeats)  # each row as measured: a bench cut short keeps the rows it timed
    return _write(suite, out_dir, rows, dev, repeats)


def _row(suite: Suite, cell: CellConfig, k: int | str, epoch_s: float, alone_s: float, peak: float, epochs: int,
         dev: torch.device, unfused: bool = False) -> dict:
    members = 1 if unfused else int(k)
    return {"suite": suite.name, "layer": cell.model.layer, "depth": cell.model.depth, "dim": cell.model.embed_dim,
            "batch": cell.train.batch_size, "group": "unfused" if unfused else k, "epoch_s": epoch_s,
            "cells_per_hour": 3600.0 * members / (epoch_s * epochs),
            "speedup_vs_unfused": (members * alone_s / epoch_s) if not unfused else 1.0, "peak_mib": peak,
            "device": device_slug(dev), "torch": torch_version()}


def _write(suite: Suite, out_dir: Path, rows: list[dict], dev: torch.device, repeats: int) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"fuse-{device_slug(dev)}-{torch_version()}"  # not Path.with_suffix: "2.14.1" has a dot of its own
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.to_csv(out_dir / f"{stem}.csv", index=False)
    shown = frame.assign(epoch_s=frame["epoch_s"].map("{:.3f}".format),
                         cells_per_hour=frame["cells_per_hour"].map("{:.1f}".format),
                         speedup_vs_unfused=frame["speedup_vs_unfused"].map("{:.2f}x".format),
                         peak_mib=frame["peak_mib"].map(lambda v: "-" if v != v else f"{v:.0f}"))
    text = (f"# Fused training: {suite.name}\n\n{machine_line(dev)}\n\n"
            f"One epoch of each row's cells (its data and evaluation included) trained as one fused model of K "
            f"members, against one cell alone; median of {repeats} interleaved rounds. cells/hour assumes the suite's "
            f"{suite.cells()[0].config.train.epochs} epochs a cell; speedup = K x (one cell's epoch) / (the group's "
            "epoch). Peak memory: the CUDA peak (not measured on a CPU).\n\n"
            + markdown_table(shown.drop(columns=["suite", "device", "torch"])) + "\n")
    (out_dir / f"{stem}.md").write_text(text)
    return out_dir / f"{stem}.md"
