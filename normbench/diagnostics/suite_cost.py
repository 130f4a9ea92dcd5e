"""`normbench bench SUITE`: what each of a suite's layers costs per train step at the suite's own shape.

`normbench bench` alone times layers on a CIFAR-shaped model; a leaderboard's cost column needs its own cells' cost:
the suite's data (image size, channels, classes), model (width, heads, patch), batch and recipe (amp, compile), and
each layer built as training builds it (Admin profiles its ω on the training images; nGPT's after-step
renormalisation is part of its step). At each depth every layer's model is built first, then they are timed in
turn, A B C ... A B C ..., so a loaded machine's drift hits them alike, on one fixed batch of training images.

Writes `cost-<device>-<torch>.csv` and `.md` into the output folder (a suite's, for its leaderboard: `normbench
leaderboard` shows every `cost-*.csv` it finds there): per layer and depth the step time, images/s, memory (the CUDA
peak, else the train step's estimate: bench.py `train_memory_mib`) and both divided by the suite's baseline's.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import timm
import torch

from normbench.contracts.recipe import CellConfig
from normbench.contracts.suite import Suite
from normbench.diagnostics.bench import (
    StepSetup,
    compile_room,
    device_slug,
    machine_header,
    make_train_step,
    time_interleaved,
    torch_version,
    train_memory_mib,
    warm_up,
)
from normbench.errors import NormbenchError
from normbench.report.tables import markdown_table
from normbench.train.device import resolve_device

COSTLESS_AXES = ("depth", "layer", "lr", "seed", "epochs", "warmup_epochs")  # the rest may change a step's cost
COLUMNS = ["suite", "layer", "depth", "dim", "heads", "patch", "img_size", "batch", "params", "step_ms", "images_per_s",
           "step_vs_baseline", "memory_mib", "memory", "mem_vs_baseline", "baseline", "device", "torch", "timm"]


def cost_configs(suite: Suite, depths: list[int] | None, layers: list[str] | None) -> dict[tuple[int, str], Any]:
    """One recipe per (depth, layer) of the suite, its first lr and seed (neither changes a step's cost); the
    baseline always among them, as every ratio divides by it. NormbenchError for a depth or layer it lacks."""
    others = [axis for axis in suite.matrix if axis not in COSTLESS_AXES]
    if others:
        raise NormbenchError(f"bench {suite.path}: its matrix also varies {', '.join(others)}, which changes a step's "
                             "cost; bench times one recipe per (depth, layer): give it a suite whose matrix varies "
                             "only depth, layer, lr, seed or epochs")
    depths = depths or suite.depths()
    layers = layers or suite.layers()
    unknown = [f"depth {d}" for d in depths if d not in suite.depths()] + [x for x in layers if x not in suite.layers()]
    if unknown:
        raise NormbenchError(f"bench {suite.path}: the suite has no {', '.join(map(str, unknown))}; it trains depths "
                             f"{suite.depths()} and layers {suite.layers()}")
    baseline = suite.baseline or "layernorm"
    if baseline not in layers:
        layers = [baseline, *layers]
    return {(d, layer): suite.cell({"depth": d, "layer": layer}).config for d in depths for layer in layers}


def step_setup(config: CellConfig, dev: torch.device) -> StepSetup:
    """The recipe's amp and compile, as train/loop.py resolves "auto" (on for CUDA)."""
    on_cuda = dev.type == "cuda"
    return StepSetup(dev=dev, batch=config.train.batch_size, amp=config.train.uses_bf16(on_cuda),
                     compile=config.train.uses_compile(on_cuda))


def measure(configs: dict[tuple[int, str], CellConfig], dev: torch.device, warmup: int, repeats: int,
            steps: int) -> list[dict[str, Any]]:
    """Step time and memory of each recipe's model, the models of one depth timed in turn."""
    from normbench.data import build_data
    from normbench.train.loop import build_model
    from normbench.train.optimizer import build_optimizer

    first = next(iter(configs.values()))
    data = build_data(first.data, batch_size=first.train.batch_size, device=dev, seed=0, img_size=first.model.img_size)
    data.train.set_epoch(0)
    x, y = next(iter(data.train))  # one fixed batch of training images for every model
    rows: list[dict[str, Any]] = []
    for depth in sorted({d for d, _ in configs}):
        models: dict[str, Any] = {}
        at_depth = {layer: config for (d, layer), config in configs.items() if d == depth}
        with compile_room(step_setup(first, dev), len(at_depth)):
            for layer, config in at_depth.items():
                setup = step_setup(config, dev)
                before = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
                torch.manual_seed(0)
                model = build_model(config, data).to(dev)
                estimate = train_memory_mib(model, setup, x)
                step = make_train_step(model, setup, (x, y), build_optimizer(model, config.train, dev))
                peak = warm_up(step, setup, warmup, before)
                models[layer] = (config, setup, model, step, peak, estimate)
            times = time_interleaved({k: v[3] for k, v in models.items()}, dev, steps, repeats)
        for layer, (config, setup, model, _, peak, estimate) in models.items():
            m = config.model
            rows.append({"layer": layer, "depth": depth, "dim": m.embed_dim, "heads": m.num_heads,
                         "patch": m.patch_size, "img_size": data.img_size, "batch": setup.batch,
                         "params": sum(p.numel() for p in model.parameters()), "step_ms": times[layer],
                         "images_per_s": setup.batch / (times[layer] / 1e3),
                         "memory_mib": estimate if math.isnan(peak) else peak,
                         "memory": "train-step estimate" if math.isnan(peak) else "peak (CUDA)"})
    return rows


def versus_baseline(frame: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """`step_vs_baseline`, `mem_vs_baseline`: each row over the baseline's row at the same depth."""
    base = frame[frame["layer"] == baseline].set_index("depth")
    return frame.assign(step_vs_baseline=frame["step_ms"] / frame["depth"].map(base["step_ms"]),
                        mem_vs_baseline=frame["memory_mib"] / frame["depth"].map(base["memory_mib"]),
                        baseline=baseline)


def suite_cost(suite: Suite, out_dir: Path, *, depths: list[int] | None = None, layers: list[str] | None = None,
               device: str = "auto", warmup: int = 1, repeats: int = 5, steps: int = 1) -> pd.DataFrame:
    """Measure, write OUT/cost-<device>-<torch>.csv and .md, and return the rows (see the module docstring)."""
    configs = cost_configs(suite, depths, layers)
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high")
    setup = step_setup(next(iter(configs.values())), dev)
    header = machine_header(setup, None)  # before measuring: the load it reports is the start's
    frame = pd.DataFrame(measure(configs, dev, warmup, repeats, steps))
    frame = versus_baseline(frame, suite.baseline or "layernorm").assign(
        suite=suite.name, device=device_slug(dev), torch=torch.__version__, timm=timm.__version__)[COLUMNS]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"cost-{device_slug(dev)}-{torch_version()}"
    frame.to_csv(out_dir / f"{stem}.csv", index=False)
    command = "normbench " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else "normbench bench SUITE"
    shown = frame.drop(columns=["suite", "device", "torch", "timm"]).round(
        {"step_ms": 1, "images_per_s": 1, "step_vs_baseline": 2, "memory_mib": 1, "mem_vs_baseline": 2})
    text = "\n".join([
        f"# What each layer of `{suite.name}` costs per train step", "", header, "",
        f"`{command}`: the suite's data, model and batch, each layer built as training builds it; {warmup} warmup "
        f"step(s), then the median of {repeats} repeats of {steps} step(s), the models of each depth timed in turn "
        f"(A B C ... A B C ...) so that the machine's load hits them alike. `step_vs_baseline` and "
        f"`mem_vs_baseline` divide by the {suite.baseline or 'layernorm'} row of the same depth.", "",
        markdown_table(shown.astype(object).where(shown.notna(), "")), ""])
    (out_dir / f"{stem}.md").write_text(text, encoding="utf-8")
    print(text)
    return frame
