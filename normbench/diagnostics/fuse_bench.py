"""`normbench bench SUITE --fuse 1 8`: cells per hour of the suite's own cells trained one by one, by N worker
processes side by side, fused (train/fused.py), fused and compiled, fused as CUDA graphs, and W fused workers side
by side, on the same device; and the model FLOPs utilisation of each against the device's peak.

What is timed is a steady-state epoch: each configuration trains its cells two epochs, and the second one's wall time
(its val pass included, as every epoch of a cell has one) is the figure. The models' build, the first epoch (where a
compile lands) and the final test pass are outside it. Cells per hour is `workers x cells per group x 3600 /
(epoch seconds x the suite's epochs)`; speedup is against one cell alone. The groups are those the suite really
forms (sweep/fuse_plan.py): a row's selection cells (its lrs x seeds), at most K of them, never a cell repeated; W
fused workers each train such a group (the same row's, a stand-in for W rows of one cost). N workers unfused each
train one of the row's cells. The configurations are interleaved, round after round, and the median of `repeats`
rounds is reported; memory is the CUDA peak (a CPU's is not measured).

Model FLOPs per train step come from torch.utils.flop_counter (forward and backward of one cell, counted on a
small batch and scaled to the suite's); the utilisation is the FLOPs a configuration performs per second over the
device's dense bf16 peak (`PEAKS`; n/a where the table has none, a CPU's included). `depth36` adds rows at the
depth36 suite's shape (CIFAR-shaped synthetic data, width 192, batch 256, bf16), the shape the lease plan's 30%
target names.

Writes `fuse-<device>-<torch>.csv` and `.md` into the output folder after each configuration (a lease's time limit
that interrupts the bench keeps the rows it measured); sweep/fuse_plan.py reads the newest such file of a GPU to
resolve `--fuse auto` there.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.contracts.suite import Suite
from normbench.data.config import DataConfig
from normbench.diagnostics.bench import device_slug, torch_version
from normbench.diagnostics.suite_cost import cost_configs
from normbench.report.machine import machine_line
from normbench.report.tables import markdown_table
from normbench.train.device import device_name, resolve_device
from normbench.train.fused import train_group
from normbench.train.fusion_rules import refusal
from normbench.train.loop import build_fit, train_cell

COLUMNS = ["suite", "stage", "layer", "depth", "dim", "batch", "config", "group", "workers", "epoch_s", "first_s",
           "cells_per_hour", "speedup", "step_gflop", "mfu", "peak_mib", "device", "torch"]
# dense bf16 tensor-core peaks (NVIDIA's data sheets, without sparsity), by a name torch reports for the device
PEAKS = {"H200": 989.4e12, "H100 NVL": 835e12, "H100 PCIe": 756e12, "H100": 989.4e12}
FLOP_BATCH = 2  # images a FLOP count runs on: every op's FLOPs grow linearly with the batch, so it scales exactly
DEPTH36, DEPTH36_EPOCHS = "depth36 shape", 100  # the MFU rows' suite column; suites/depth36.yaml's epochs


def peak_flops(name: str) -> float | None:
    """The device's dense bf16 peak in FLOP/s from `PEAKS` (the most specific name that matches), else None."""
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in name:
            return PEAKS[key]
    return None


def row_cells(suite: Suite, depth: int, layer: str) -> list[CellConfig]:
    """The row's selection cells (the matrix's lrs x seeds: the group a worker forms), two epochs each, no
    checkpoints: the bench times the second epoch."""
    row = [c.config for c in suite.cells() if c.config.model.depth == depth and c.config.model.layer == layer]
    return [two_epochs(c) for c in row]


def two_epochs(cell: CellConfig) -> CellConfig:
    return dataclasses.replace(cell, train=dataclasses.replace(cell.train, epochs=2, checkpoint_minutes=0.0))


def depth36_cells(k: int) -> list[CellConfig]:
    """suites/depth36.yaml's shape on CIFAR-shaped synthetic data (32x32x3, 100 classes): depth 36, width 192,
    3 heads, patch 4, batch 256, bf16, layernorm; its stochastic depth off (fused groups refuse it); k seeds."""
    data = DataConfig(name="synthetic", num_classes=100, synthetic_size=32, synthetic_channels=3, train_size=4096,
                      val_size=512, test_size=512)
    model = ModelConfig(layer="layernorm", depth=36, embed_dim=192, num_heads=3, patch_size=4)
    return [CellConfig(model=model, data=data, train=TrainConfig(epochs=2, batch_size=256, lr=1e-3, seed=s, amp="bf16",
                                                                 compile="off", warmup_epochs=0.5,
                                                                 checkpoint_minutes=0.0, telemetry_every=0))
            for s in range(k)]


# ------------------------------------------------------------------------------------------------ one timing

def steady_epoch(cells: list[CellConfig], device: str, compile: bool | None = None, graphs: bool = False,
                 barrier: Any = None) -> tuple[float, float, float]:
    """(seconds of the second of two epochs, CUDA peak MiB or NaN, seconds to the first epoch's end: the build, a
    compile, the first epoch) of `cells` trained alone (one cell) or fused. `barrier`: the worker processes start
    their timed epoch together."""
    dev = resolve_device(device)
    marks: list[float] = []
    started = time.perf_counter()

    def mark(record: Any) -> bool:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if barrier is not None and not marks:
            barrier.wait()
        marks.append(time.perf_counter())
        return False

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    if len(cells) == 1:
        train_cell(cells[0], dev, on_epoch=mark)
    else:
        train_group(cells, dev, on_epoch=[mark] + [None] * (len(cells) - 1), compile=compile, graphs=graphs)
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else float("nan")
    return marks[1] - marks[0], peak, marks[0] - started


def _worker(cells: list[CellConfig], device: str, threads: int, compile: bool | None, graphs: bool, barrier: Any,
            results: Any) -> None:
    """A worker process's timing (spawned: its own torch, threads and CUDA context)."""
    torch.set_num_threads(threads)
    results.put(steady_epoch(cells, device, compile, graphs, barrier))


def in_workers(per_worker: list[list[CellConfig]], device: str, compile: bool | None = None,
               graphs: bool = False) -> tuple[float, float, float]:
    """Each list of cells timed in its own process, all at once: the medians of their epoch and first-epoch
    seconds, the largest peak MiB."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(len(per_worker)), ctx.Queue()
    threads = max(1, (os.cpu_count() or 1) // len(per_worker)) if resolve_device(device).type == "cpu" else 1
    procs = [ctx.Process(target=_worker, args=(cells, device, threads, compile, graphs, barrier, results))
             for cells in per_worker]
    for p in procs:
        p.start()
    try:
        timings = [results.get(timeout=3600) for _ in procs]
    except BaseException:  # Ctrl-C or a stage's `timeout -s INT`: the workers stop now, not after their epochs
        for p in procs:
            p.kill()
        raise
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if any(p.exitcode for p in procs):
        raise RuntimeError(f"a bench worker failed (exit codes {[p.exitcode for p in procs]})")
    return (statistics.median(s for s, _, _ in timings), max(m for _, m, _ in timings),
            statistics.median(f for _, _, f in timings))


# ------------------------------------------------------------------------------------------------- FLOPs

def step_flops(cell: CellConfig, device: str = "cpu") -> tuple[float, int]:
    """(model FLOPs of one train step of `cell` at its batch, forward and backward, counted by FlopCounterMode on
    FLOP_BATCH images and scaled to the batch; its optimizer steps per epoch)."""
    fit = build_fit(dataclasses.replace(cell, train=dataclasses.replace(cell.train, compile="off")), device, None,
                    None)
    x, y = next(iter(fit.data.train))
    x, y = x[:FLOP_BATCH], y[:FLOP_BATCH]
    with FlopCounterMode(display=False) as counter:
        with fit.autocast():
            loss = fit.loss_fn(fit.model(x), y)
        loss.backward()
    return counter.get_total_flops() * cell.train.batch_size / x.shape[0], fit.steps_per_epoch


# ------------------------------------------------------------------------------------------------- the bench

@dataclasses.dataclass
class Config:
    """One configuration timed: `per_worker` the cells each process trains (one: in this process)."""

    name: str
    per_worker: list[list[CellConfig]]
    compile: bool | None = None
    graphs: bool = False

    @property
    def group(self) -> int:
        return len(self.per_worker[0])

    def time(self, device: str) -> tuple[float, float, float]:
        if len(self.per_worker) == 1:
            return steady_epoch(self.per_worker[0], device, self.compile, self.graphs)
        return in_workers(self.per_worker, device, self.compile, self.graphs)


def configs_for(cells: list[CellConfig], sizes: list[int], dev: torch.device, workers: int, fused_workers: int,
                compiled: bool) -> list[Config]:
    """What a row is timed as: one cell alone, `workers` cells in as many processes, the row's group at each size
    (at most its cells), the largest group compiled and (CUDA) as CUDA graphs, `fused_workers` such groups side by
    side."""
    eager = False  # the fused rows' step uncompiled, whatever the recipe says: "fused+compiled" is its own row
    groups = sorted({min(k, len(cells)) for k in sizes if min(k, len(cells)) > 1})
    out = [Config("alone", [cells[:1]])]
    if workers > 1:
        out.append(Config("workers", [[cells[i % len(cells)]] for i in range(workers)]))
    out += [Config("fused", [cells[:k]], compile=eager) for k in groups]
    if groups:
        largest = cells[:groups[-1]]
        if compiled:
            out.append(Config("fused+compiled", [largest], compile=True))
        if dev.type == "cuda":
            out.append(Config("fused+graphs", [largest], compile=eager, graphs=True))
        if fused_workers > 1:
            out.append(Config("workers x fused", [largest] * fused_workers, compile=eager))
    return out


def fuse_bench(suite: Suite, out_dir: Path, sizes: list[int], *, depths: list[int] | None = None,
               layers: list[str] | None = None, device: str = "auto", repeats: int = 3, workers: int | None = None,
               fused_workers: int | None = None, compile: str = "auto", depth36: bool | None = None) -> Path:
    """Time each row of the suite in every configuration (`configs_for`); write the tables; returns the .md path.
    `workers`/`fused_workers`: processes side by side (default: the CPU's cores and 2 on a CPU; 14 and 4 on CUDA,
    the lease's comparison); `compile`: time the compiled step too (auto: on CUDA only, where it pays; a CPU's
    inductor compile takes minutes); `depth36`: the MFU rows at depth36's shape (default: where the device's peak
    is known)."""
    dev = resolve_device(device)
    cuda = dev.type == "cuda"
    workers = workers or (14 if cuda else (os.cpu_count() or 1))
    fused_workers = fused_workers or (4 if cuda else 2)
    compiled = compile == "on" or (compile == "auto" and cuda)
    peak = peak_flops(device_name(dev)) if cuda else None
    epochs = suite.cells()[0].config.train.epochs
    rows: list[dict[str, Any]] = []
    for depth, layer in cost_configs(suite, depths, layers):
        cells = row_cells(suite, depth, layer)
        if (reason := refusal(cells, dev)) is not None:
            print(f"normbench: bench --fuse: {layer} at depth {depth} is not fused ({reason})", file=sys.stderr)
            continue
        flops, steps = step_flops(cells[0], str(dev))
        configs = configs_for(cells, sizes, dev, workers, fused_workers, compiled)
        _measure(configs, repeats, str(dev), rows, lambda c, t, f=flops, n=steps, first=cells[0]: _row(
            suite.name, "selection", first, c, t, epochs, f, n, peak, dev, rows))
        _write(suite, out_dir, rows, dev, repeats, peak)
        print(f"normbench: bench --fuse: {layer} depth {depth}: " + ", ".join(
            f"{r['config']} K={r['group']} x{r['workers']}: {r['speedup']:.2f}x" for r in rows
            if r["layer"] == layer and r["depth"] == depth), file=sys.stderr)
    if depth36 if depth36 is not None else peak is not None:
        cells = depth36_cells(max(sizes))
        flops, steps = step_flops(cells[0], str(dev))
        configs = configs_for(cells, sizes, dev, 1, 1, compiled)
        _measure(configs, repeats, str(dev), rows, lambda c, t, f=flops, n=steps, first=cells[0]: _row(
            DEPTH36, "selection", first, c, t, DEPTH36_EPOCHS, f, n, peak, dev, rows))
        _write(suite, out_dir, rows, dev, repeats, peak)
    return _write(suite, out_dir, rows, dev, repeats, peak)


def _measure(configs: list[Config], repeats: int, device: str, rows: list[dict[str, Any]],
             row: Callable[[Config, tuple[float, float, float]], dict[str, Any]]) -> None:
    """Time `configs` interleaved, `repeats` rounds after an untimed one (the data's first load, the allocator's
    first blocks); append each configuration's row (its medians) as its last round ends."""
    configs[0].time(device)
    timed: dict[str, list[tuple[float, float, float]]] = {}
    for r in range(repeats):
        for c in configs:
            timed.setdefault(f"{c.name} {c.group}", []).append(c.time(device))
            if r == repeats - 1:
                runs = timed[f"{c.name} {c.group}"]
                peaks = [m for _, m, _ in runs if m == m]
                rows.append(row(c, (statistics.median(s for s, _, _ in runs), max(peaks) if peaks else float("nan"),
                                    statistics.median(f for _, _, f in runs))))


def _row(suite: str, stage: str, cell: CellConfig, config: Config, timed: tuple[float, float, float], epochs: int,
         flops: float, steps: int, peak: float | None, dev: torch.device, rows: list[dict[str, Any]]) -> dict:
    epoch_s, peak_mib, first_s = timed
    workers, group = len(config.per_worker), config.group
    cells_per_hour = 3600.0 * workers * group / (epoch_s * epochs)
    alone = next((r["cells_per_hour"] for r in rows if r["suite"] == suite and r["layer"] == cell.model.layer
                  and r["depth"] == cell.model.depth and r["config"] == "alone"), cells_per_hour)
    done = workers * group * steps * flops  # model FLOPs of the timed epoch (the val pass's not counted)
    return {"suite": suite, "stage": stage, "layer": cell.model.layer, "depth": cell.model.depth,
            "dim": cell.model.embed_dim, "batch": cell.train.batch_size, "config": config.name, "group": group,
            "workers": workers, "epoch_s": epoch_s, "first_s": first_s, "cells_per_hour": cells_per_hour,
            "speedup": cells_per_hour / alone, "step_gflop": flops / 1e9,
            "mfu": done / epoch_s / peak if peak else float("nan"), "peak_mib": peak_mib,
            "device": device_slug(dev), "torch": torch_version()}


def _write(suite: Suite, out_dir: Path, rows: list[dict], dev: torch.device, repeats: int,
           peak: float | None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"fuse-{device_slug(dev)}-{torch_version()}"  # not Path.with_suffix: "2.14.1" has a dot of its own
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.to_csv(out_dir / f"{stem}.csv", index=False)
    shown = frame.assign(epoch_s=frame["epoch_s"].map("{:.3f}".format), first_s=frame["first_s"].map("{:.1f}".format),
                         cells_per_hour=frame["cells_per_hour"].map("{:.1f}".format),
                         speedup=frame["speedup"].map("{:.2f}x".format),
                         step_gflop=frame["step_gflop"].map("{:.2f}".format),
                         mfu=frame["mfu"].map(lambda v: "n/a" if not math.isfinite(v) else f"{100 * v:.1f}%"),
                         peak_mib=frame["peak_mib"].map(lambda v: "-" if v != v else f"{v:.0f}"))
    peak_words = (f"{peak / 1e12:.0f} TFLOP/s dense bf16" if peak else
                  "n/a: no peak for this device in the table (a CPU's included)")
    text = (f"# Fused training: {suite.name}\n\n{machine_line(dev)}\n\n"
            "A steady-state epoch (the second of two; build, first epoch and test pass outside it) of each row's "
            "selection cells, at most K a group (the groups the suite forms, no cell repeated): one cell alone, N "
            "worker processes unfused, fused (K members one model), fused and compiled, fused as CUDA graphs, W "
            f"fused workers; median of {repeats} interleaved rounds. cells/hour = workers x K x 3600 / (epoch "
            f"seconds x the suite's {suite.cells()[0].config.train.epochs} epochs); speedup against one cell alone; "
            "first_s: from the start to the first epoch's end (the build, a compile, one epoch), a group's one-time "
            "cost, which `--fuse auto` weighs in (sweep/fuse_plan.py). "
            f"step GFLOP: one cell's train step (torch.utils.flop_counter); MFU against the device's peak, "
            f"{peak_words}. Peak memory: the CUDA peak (not measured on a CPU).\n\n"
            + markdown_table(shown.drop(columns=["device", "torch"])) + "\n")
    (out_dir / f"{stem}.md").write_text(text)
    return out_dir / f"{stem}.md"
