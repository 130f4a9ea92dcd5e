"""How a worker fuses (`--fuse`, sweep/group_run.py): the largest group, the smallest worth fusing, fused workers per
GPU, a compiled or graph-captured step, and how long a worker waits at a stage's start to fill a group; and the
groups a suite forms under that plan (the dry run's line). Pure: no torch.

`--fuse auto` takes these from the newest fuse bench of this device (`normbench bench SUITE --fuse ...`,
diagnostics/fuse_bench.py: results/fuse*/fuse-<device>-<torch>.csv) when one exists: the configuration that trained
the most cells per hour (its workers, its compile or CUDA graphs), and the smallest group that beat one cell alone.
Without one: the constants below, from the leases docs/speed.md records. On a CPU `auto` stays 1 (unfused): one
thread per worker, fusing measured 0.93x at K = 4 (docs/speed.md), and a CPU sweep keeps its cells' numerics.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.contracts.suite import BUDGET_FACTOR, BUDGET_SEEDS, Suite

# the axes members of a fused group may differ in: train/fusion_rules.py FUSABLE_KEYS' axes, and a tune
# confirmation's search trial (its recipe is the trial's sampled values, which the fusion rules check)
FUSED_AXES = frozenset({"lr", "seed", "epochs", "warmup_epochs", "search_trial"})
WAIT_SECONDS = 3.0  # at a stage's start, how long a worker waits for its group to fill (peers queue it meanwhile)
MEASURED = "results"  # where `auto` looks for fuse-<device>-*.csv, relative to the working directory


@dataclass(frozen=True)
class FusePlan:
    """What `--fuse` resolves to: `k` the most cells a group takes (1: unfused), `min_k` the fewest worth fusing
    (a smaller group trains its cells alone), `workers` fused workers per GPU when `--workers` is not given,
    `compile`/`graphs` the step's (None: as each cell's `train.compile`), `wait_s` the wait at a stage's start."""

    k: int = 1
    min_k: int = 2
    workers: int = 1
    compile: bool | None = None
    graphs: bool = False
    wait_s: float = WAIT_SECONDS
    source: str = "--fuse"

    def words(self) -> str:
        if self.k <= 1:
            return f"unfused ({self.source})"
        step = "compiled, CUDA graphs" if self.compile and self.graphs else "compiled" if self.compile \
            else "CUDA graphs" if self.graphs else "the recipe's compile"
        return (f"groups of {self.min_k} to {self.k} cells, {self.workers} fused worker(s) per GPU, {step} "
                f"({self.source})")


# --fuse auto on CUDA without a measurement: the third lease's fused bench (H200, modern suite, eager fp32): a group
# paid from K = 3-4 (layernorm 0.38x at 1, 1.58x at 4) and kept gaining to 64; 16 takes every real group whole
CUDA_CONSTANTS = FusePlan(k=16, min_k=3, workers=2, source="docs/speed.md's constants: no fuse bench of this device")
CPU_AUTO = FusePlan(k=1, source="auto on a CPU: fusing does not pay at one thread per worker")
FUSED_CONFIGS = ("fused", "fused+compiled", "fused+graphs", "workers x fused")


def plan_for(fuse: int | str, device_type: str, slug: str | None = None, measured: Path = Path(MEASURED)) -> FusePlan:
    """`--fuse` resolved for a device of `device_type` ("cuda", "cpu", ...) named `slug` (`slug_of` its name; None:
    any GPU's measurement)."""
    if fuse != "auto":
        return FusePlan(k=int(fuse), min_k=2)
    if device_type != "cuda":
        return CPU_AUTO
    csv = newest_measurement(measured, slug)
    if csv is None:
        return CUDA_CONSTANTS
    import pandas as pd

    try:
        rows = pd.read_csv(csv).to_dict("records")
    except (OSError, ValueError):
        return CUDA_CONSTANTS
    return from_rows(rows, str(csv)) or CUDA_CONSTANTS


def slug_of(name: str) -> str:
    """A device's name as the fuse bench names its file (diagnostics/bench.py `device_slug`): 'NVIDIA H200' ->
    'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def newest_measurement(measured: Path, slug: str | None) -> Path | None:
    files = [p for p in measured.glob("fuse*/fuse-*.csv") if not p.name.startswith("fuse-cpu-")
             and (slug is None or p.name.startswith(f"fuse-{slug}-"))]
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def from_rows(rows: list[Mapping[str, Any]], source: str) -> FusePlan | None:
    """The plan a fuse bench's rows (diagnostics/fuse_bench.py COLUMNS) say is fastest over a whole cell (each
    group's first epoch, its build and any compile, counted once: `whole_cell_speedup`); None when they hold no fused
    row."""
    rows = [dict(r, speedup=whole_cell_speedup(r, rows)) for r in rows]

    def speedups(config: str) -> list[float]:
        return [float(r["speedup"]) for r in rows if r.get("config") == config and r["speedup"] == r["speedup"]]

    fused = {c: _median(speedups(c)) for c in FUSED_CONFIGS if speedups(c)}
    if not fused:
        return None
    best = max(fused, key=fused.__getitem__)
    if fused[best] <= _median(speedups("workers") or [0.0]):  # unfused workers did better: no group pays
        return dataclasses.replace(CUDA_CONSTANTS, k=1, source=f"{source}: unfused workers measured faster")
    workers = max((int(r["workers"]) for r in rows if r.get("config") == best), default=1)
    sizes = sorted({int(r["group"]) for r in rows if r.get("config") == "fused" and float(r["speedup"]) >= 1.0})
    return FusePlan(k=16, min_k=max(2, sizes[0]) if sizes else CUDA_CONSTANTS.min_k, workers=max(1, workers),
                    compile="compiled" in best, graphs="graphs" in best, source=f"{source}: {best} fastest")


def whole_cell_speedup(row: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> float:
    """`row`'s speedup over one cell alone for whole cells: its steady epochs plus its first one (`first_s`: the
    build, a compile, one epoch) once, as a worker pays them per group; the steady-state speedup where the bench
    recorded no first epoch."""
    def rate(r: Mapping[str, Any]) -> float:
        first = float(r.get("first_s", float("nan")))
        if first != first:
            return float(r["cells_per_hour"])
        cells = float(r["workers"]) * float(r["group"])
        epochs = 3600.0 * cells / (float(r["cells_per_hour"]) * float(r["epoch_s"]))  # the suite's, back
        return 3600.0 * cells / (first + (epochs - 1) * float(r["epoch_s"]))

    same = [r for r in rows if r.get("config") == "alone" and all(r.get(k) == row.get(k)
                                                                  for k in ("suite", "layer", "depth"))]
    if not same:
        return float(row.get("speedup", float("nan")))
    return rate(row) / rate(same[0])


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else 0.0


# ------------------------------------------------------------------------------------------ the groups it forms

def row_of(axes: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What a cell shares with the cells it may be fused with: its axes but lr, seed, epochs and warmup."""
    return tuple(sorted((k, str(v)) for k, v in axes.items() if k not in FUSED_AXES))


def chunks(cells: Iterable[Mapping[str, Any]], plan: FusePlan) -> list[int]:
    """The sizes of the groups `cells` of one stage form: by row, at most `k` a group; 1 for each cell trained
    alone (a row's remainder under `min_k`)."""
    by_row: dict[Any, int] = {}
    for axes in cells:
        by_row[row_of(axes)] = by_row.get(row_of(axes), 0) + 1
    sizes: list[int] = []
    for n in by_row.values():
        while n:
            size = min(n, max(1, plan.k))
            sizes += [size] if size >= plan.min_k and size > 1 else [1] * size
            n -= size
    return sizes


def stage_groups(suite: Suite, plan: FusePlan) -> dict[str, list[int]]:
    """The groups each stage of `suite` forms under `plan`: the matrix (selection), and the report stage (each row's
    report seeds, with the convergence check's 2x cells of the row joining them). Bracketing rounds add a row's
    cells beyond its lr grid as selection goes; their groups are a round's row's cells, at most `k`."""
    stages = {"selection": chunks((c.axes for c in suite.cells()), plan)}
    if suite.report_seeds:
        rows = {row_of(c.axes): {k: v for k, v in c.axes.items() if k not in FUSED_AXES} for c in suite.cells()}
        report = [{**axes, "seed": s} for axes in rows.values() for s in suite.report_seeds]
        budget = ([{**axes, "seed": s, "epochs": f"{BUDGET_FACTOR}x"} for axes in rows.values()
                   for s in suite.report_seeds[:BUDGET_SEEDS]] if suite.budget_check else [])
        stages["report"] = chunks(report + budget, plan)
    return stages


def tune_stage_groups(suite: Suite, plan: FusePlan) -> dict[str, list[int]]:
    """The groups `normbench tune` forms under `plan`: each search's trials in batches of at most its in-flight bound
    (contracts/tuning.py `search_in_flight`), each row's confirmations together, each winner's re-runs together. A
    row whose search draws a tunable that builds other modules (train/fusion_rules.py) trains its trials alone."""
    from normbench.contracts.layer_tunables import only_inits, space_for
    from normbench.contracts.tuning import confirm_seed, search_in_flight, search_keys, search_seed, seeds

    tune = suite.tune
    assert tune is not None
    cap = search_in_flight(tune)
    search_plan = plan if cap is None else dataclasses.replace(plan, k=min(plan.k, cap))
    stages: dict[str, list[int]] = {"searches": [], "confirmations": [], "re-runs": []}
    for key in search_keys(suite):
        layer = str(key.get("layer", suite.model.get("layer", "layernorm")))
        fusable = only_inits(space_for(tune.space, layer), layer)
        row = {**key, "seed": search_seed(suite)}
        stages["searches"] += chunks([row] * tune.trials, search_plan) if fusable else [1] * tune.trials
        picked = [{**key, "seed": confirm_seed(suite), "search_trial": i} for i in range(tune.confirm_top)]
        stages["confirmations"] += chunks(picked, plan) if fusable else [1] * len(picked)
        stages["re-runs"] += chunks([{**key, "seed": s} for s in seeds(suite)], plan)
    return {stage: sizes for stage, sizes in stages.items() if sizes}


def groups_line(suite: Suite, plan: FusePlan, device: str, stages: dict[str, list[int]] | None = None) -> str:
    """The dry run's line: the groups each stage forms under `--fuse` on `device` (`stages`: tune's, else run's)."""
    parts = []
    for stage, sizes in (stages or stage_groups(suite, plan)).items():
        fused = [s for s in sizes if s > 1]
        counts = {s: fused.count(s) for s in sorted(set(fused), reverse=True)}
        shown = ", ".join(f"{n} of {s}" for s, n in counts.items()) or "none"
        alone = len(sizes) - len(fused)
        parts.append(f"{stage}: {shown}" + (f" (+{alone} alone)" if alone else ""))
    return f"fused groups on {device}, {plan.words()}: " + "; ".join(parts)


def dry_run_groups(suite: Suite, fuse: int | str, device: str | None, tune: bool = False) -> str:
    """The dry run's groups line for `--fuse` on `device` as typed (`--device cuda` on a machine without one shows
    what a CUDA machine would form: the dry run trains nothing), of `run`'s stages or (`tune`) tune's; '' when
    nothing would fuse."""
    kind = (device or suite.device or "auto").split(":")[0]
    if kind == "auto":
        import torch

        kind = "cuda" if torch.cuda.is_available() else "cpu"
    plan = plan_for(fuse, kind)
    if plan.k <= 1:
        return ""
    return groups_line(suite, plan, kind, tune_stage_groups(suite, plan) if tune else None)
