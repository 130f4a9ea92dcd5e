"""`normbench bench`: what each layer costs, as an op and inside a full train step, next to timm's own ViT.

Per (layer, depth, dim) it measures

1. the layer's norm-slot op (and gate op, if it has one), forward + backward on a (B, T, C) tensor, against torch's
   fused `nn.LayerNorm` on the same tensor, interleaved so that both see the same machine state;
2. one NormbenchViT train step (forward, cross-entropy, backward, AdamW), with bf16 autocast and torch.compile on
   CUDA: images/s, step ms, achieved TFLOP/s from an analytic matmul count, MFU and peak memory;
3. the same step on timm's `VisionTransformer` for the layers timm can express (layernorm, layerscale), measured
   A B A B against the normbench model so that drift on a noisy machine hits both alike;
4. what a train step holds in memory: on CUDA the measured peak (`peak_mem_mib`); on every device `train_mem_mib`,
   the parameters, their gradients and AdamW's two moments plus the activations autograd saves for the backward
   pass (each storage once, counted with saved_tensors_hooks on an eager forward), the step's high-water mark on a
   CPU, where no allocator reports one;
5. against layernorm: `step_vs_layernorm` and `mem_vs_layernorm` divide each row by the layernorm row of the same
   depth and dim when the bench measured one (a block family's cost: `FAMILY_LAYERS`, scripts/bench_families.py).
   A block family's after-step hook (nGPT's renormalisation) is part of its timed step.

and writes `bench-<device>-<torch>.csv` and `.md` into the output folder: by default runs/, which git ignores, so a
try never overwrites the figures committed under results/ (`--out results` publishes). Timings are medians over
repeats.
"""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from normbench.diagnostics import MISSION_LAYERS
from normbench.layers import cait_init_values, resolve_layer
from normbench.model.vit import NormbenchViT
from normbench.report.machine import load_note, machine_line
from normbench.report.tables import markdown_table
from normbench.train import fastpath
from normbench.train.device import resolve_device

IMG_SIZE, PATCH_SIZE, IN_CHANS, NUM_CLASSES = 32, 4, 3, 100  # CIFAR-100-shaped input, as the suites train
# bf16 dense tensor-core peaks (FLOP/s), matched by substring of torch.cuda.get_device_name(); first match wins,
# so the PCIe and NVL H100s must come before the SXM one.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
)
COLUMNS = ["layer", "depth", "dim", "batch", "params", "norm_op_ms", "gate_op_ms", "op_ms", "layernorm_op_ms",
           "op_vs_layernorm", "step_ms", "images_per_s", "tflops", "mfu_pct", "peak_mem_mib", "timm_step_ms",
           "timm_images_per_s", "vs_timm", "train_mem_mib", "step_vs_layernorm", "mem_vs_layernorm"]


@dataclass(frozen=True)
class Iters:
    """How long to measure. `warmup` untimed calls (compilation, allocator, caches), then `repeats` timed runs of
    `steps` train steps or `op_iters` op calls each; the reported figure is the median over the repeats."""

    warmup: int
    steps: int
    op_iters: int
    repeats: int

    @classmethod
    def for_device(cls, dev: torch.device) -> Iters:
        # CPU: a ~2.5 s step at depth 12, dim 192 keeps `--depth 12 --dim 192` to ~3 minutes on 2 cores; one step
        # per repeat and more repeats, so the A B A B interleave is fine-grained against a noisy neighbour
        return cls(warmup=5, steps=20, op_iters=100, repeats=5) if dev.type == "cuda" else \
            cls(warmup=2, steps=1, op_iters=50, repeats=7)


# --- FLOPs -------------------------------------------------------------------------------------------------------

def vit_forward_flops(depth: int, dim: int, img_size: int = IMG_SIZE, patch_size: int = PATCH_SIZE,
                      in_chans: int = IN_CHANS, num_classes: int = NUM_CLASSES, mlp_ratio: float = 4.0) -> int:
    """Matmul FLOPs (2 per multiply-add) of one image's forward pass through a class-token ViT.

    Per block, with T tokens (patches + class token) and C channels:
        qkv 3 * 2TC²,  scores QKᵀ and AV 2 * 2T²C,  proj 2TC²,  MLP fc1 + fc2 2 * 2TC·(rC).
    Plus the patch embedding (a matmul of patches by a (in_chans·p², C) weight) and the head on the class token.
    Norms, gates, softmax, GELU and the optimizer are elementwise and left out, as is usual for MFU.
    """
    patches = (img_size // patch_size) ** 2
    t, c, hidden = patches + 1, dim, int(dim * mlp_ratio)
    block = 3 * 2 * t * c * c + 2 * 2 * t * t * c + 2 * t * c * c + 2 * 2 * t * c * hidden
    patch_embed = 2 * patches * (in_chans * patch_size**2) * c
    head = 2 * c * num_classes
    return depth * block + patch_embed + head


def vit_train_flops(batch: int, depth: int, dim: int, **kwargs: Any) -> int:
    """FLOPs of one train step: forward × 3 (backward costs two matmuls per forward matmul) × batch.

    The convention slightly overcounts the patch embedding, whose input needs no gradient; at depth 12, dim 192
    that is under 0.2% of the total.
    """
    return 3 * batch * vit_forward_flops(depth, dim, **kwargs)


def peak_flops(dev: torch.device) -> float | None:
    """Dense bf16 peak of the device, or None when unknown (every CPU, and GPUs missing from the table)."""
    if dev.type != "cuda":
        return None
    name = torch.cuda.get_device_name(dev)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


# --- timing ------------------------------------------------------------------------------------------------------

def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_ms(fn: Callable[[], Any], dev: torch.device, iters: int) -> float:
    """Milliseconds per call of `fn` over `iters` back-to-back calls: CUDA events on GPU (no host sync inside the
    loop), perf_counter on CPU."""
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _sync(dev)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e3 / iters


def time_interleaved(fns: dict[str, Callable[[], Any]], dev: torch.device, iters: int,
                     repeats: int) -> dict[str, float]:
    """Median ms per call for each fn, timed A B A B ... so slow drift (thermal, other processes) hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(time_ms(fn, dev, iters))
    return {name: statistics.median(s) for name, s in samples.items()}


# --- op benchmark ------------------------------------------------------------------------------------------------

def fwd_bwd(module: nn.Module, x: torch.Tensor, grad_out: torch.Tensor) -> Callable[[], Any]:
    """One forward + backward of `module` on `x`. autograd.grad returns fresh gradients rather than accumulating
    into `.grad`, so no extra add kernel is timed."""
    inputs = [x, *(p for p in module.parameters() if p.requires_grad)]

    def run() -> Any:
        return torch.autograd.grad(module(x), inputs, grad_out)

    return run


def slot_modules(layer: str, dim: int, depth: int, dev: torch.device) -> tuple[nn.Module, nn.Module | None]:
    """The norm module and gate module (None without a gate) that `layer` puts into each block."""
    plan = resolve_layer(layer)
    norm = plan.norm.cls(dim, device=dev)
    gate = plan.gate.cls(dim, depth=depth, device=dev) if plan.gate else None
    return norm, gate


def op_times(layer: str, shape: tuple[int, int, int], depth: int, dev: torch.device, it: Iters) -> dict[str, float]:
    """Forward + backward ms of the layer's norm op, its gate op and torch's nn.LayerNorm on one (B, T, C) fp32
    tensor, in eager mode. fp32 because that is what these ops see under bf16 autocast: the residual stream stays
    fp32, layer_norm is on autocast's fp32 list, and a gate's fp32 parameter promotes the bf16 branch output."""
    norm, gate = slot_modules(layer, shape[-1], depth, dev)
    ref = nn.LayerNorm(shape[-1], eps=1e-6, device=dev)
    x = torch.randn(shape, device=dev, requires_grad=True)
    g = torch.randn(shape, device=dev)
    fns = {"layernorm_op_ms": fwd_bwd(ref, x, g), "norm_op_ms": fwd_bwd(norm, x, g)}
    if gate is not None:
        fns["gate_op_ms"] = fwd_bwd(gate, x, g)
    for fn in fns.values():  # one untimed block each: on CPU the first few hundred calls still fault in pages
        for _ in range(max(it.warmup, it.op_iters)):
            fn()
    times = time_interleaved(fns, dev, it.op_iters, it.repeats)
    times["op_ms"] = times["norm_op_ms"] + times.get("gate_op_ms", 0.0)
    times["op_vs_layernorm"] = times["op_ms"] / times["layernorm_op_ms"]
    return times


# --- train-step benchmark ----------------------------------------------------------------------------------------

def num_heads_for(dim: int) -> int:
    return max(1, dim // 64)  # head width 64, as ViT-S/B


def build_normbench(layer: str, depth: int, dim: int) -> nn.Module:
    return NormbenchViT(img_size=IMG_SIZE, patch_size=PATCH_SIZE, in_chans=IN_CHANS, num_classes=NUM_CLASSES,
                        embed_dim=dim, depth=depth, num_heads=num_heads_for(dim), layer=layer)


def build_timm(layer: str, depth: int, dim: int) -> nn.Module | None:
    """timm's VisionTransformer in the same configuration, or None for a layer timm cannot express."""
    if layer not in ("layernorm", "layerscale"):
        return None
    init_values = cait_init_values(depth) if layer == "layerscale" else None  # the ε NormbenchViT picks
    return VisionTransformer(img_size=IMG_SIZE, patch_size=PATCH_SIZE, in_chans=IN_CHANS, num_classes=NUM_CLASSES,
                             embed_dim=dim, depth=depth, num_heads=num_heads_for(dim), init_values=init_values)


@dataclass(frozen=True)
class StepSetup:
    dev: torch.device
    batch: int
    amp: bool
    compile: bool

    def autocast(self) -> AbstractContextManager[Any]:
        return torch.autocast(self.dev.type, dtype=torch.bfloat16) if self.amp else nullcontext()


def bench_batch(setup: StepSetup) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed synthetic batch of the CIFAR-shaped bench: images and labels."""
    return (torch.randn(setup.batch, IN_CHANS, IMG_SIZE, IMG_SIZE, device=setup.dev),
            torch.randint(0, NUM_CLASSES, (setup.batch,), device=setup.dev))


def make_train_step(model: nn.Module, setup: StepSetup, batch: tuple[torch.Tensor, torch.Tensor] | None = None,
                    optimizer: torch.optim.Optimizer | None = None) -> Callable[[], None]:
    """A closure running one full train step on a fixed batch (`batch`, else `bench_batch`): no data loading is
    timed. `optimizer`: the recipe's (train/optimizer.py, `bench SUITE`); else AdamW over every parameter."""
    model.train()
    # what train_cell runs, applied alike to both models: the attention path and fused AdamW (train/fastpath.py)
    fastpath.set_attention_path(model, setup.dev)
    opt = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-4, **fastpath.optimizer_kwargs("adamw", setup.dev))
    forward = torch.compile(model) if setup.compile else model
    x, y = batch or bench_batch(setup)
    loss_fn = nn.CrossEntropyLoss()
    after_step = model.plan.after_step if isinstance(model, NormbenchViT) else []  # nGPT's renormalisation

    def step() -> None:
        with setup.autocast():
            loss = loss_fn(forward(x), y)
        loss.backward()
        opt.step()
        for hook in after_step:
            hook(model)
        opt.zero_grad(set_to_none=True)

    return step


def warm_up(step: Callable[[], None], setup: StepSetup, warmup: int, allocated_before: int) -> float:
    """Run the untimed steps; return the model's peak memory in MiB (CUDA: peak minus what was allocated before
    the model was built, so a model built beside another is charged only for itself; CPU: NaN, as ru_maxrss is a
    process-lifetime high-water mark and cannot be attributed to one model)."""
    if setup.dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(setup.dev)
    for _ in range(max(1, warmup)):
        step()
    _sync(setup.dev)
    if setup.dev.type != "cuda":
        return math.nan
    return (torch.cuda.max_memory_allocated(setup.dev) - allocated_before) / 2**20


def train_memory_mib(model: nn.Module, setup: StepSetup, x: torch.Tensor | None = None) -> float:
    """What one train step holds at its high-water mark, the start of the backward pass, in MiB: parameters,
    gradients and AdamW's exp_avg and exp_avg_sq (4 x the parameters' bytes) plus every activation autograd saves for
    the backward pass (each storage counted once, parameters excluded), from one eager forward on the bench batch.
    Deterministic, so it compares models on a CPU, which reports no allocator peak; the CUDA peak is measured."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    x = bench_batch(setup)[0] if x is None else x
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), setup.autocast():
        model(x).float().logsumexp(-1).sum()  # a loss's worth of graph, never backpropagated
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return (4 * param_bytes + sum(saved.values())) / 2**20


def _allocated(dev: torch.device) -> int:
    return torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0


def step_times(layer: str, depth: int, dim: int, setup: StepSetup, it: Iters) -> dict[str, float]:
    """Train-step ms and peak memory of the normbench model and, where timm can express the layer, of timm's."""
    builders: dict[str, Callable[[], nn.Module | None]] = {
        "normbench": lambda: build_normbench(layer, depth, dim), "timm": lambda: build_timm(layer, depth, dim)}
    steps: dict[str, Callable[[], None]] = {}
    out: dict[str, float] = {}
    if setup.compile:  # a bench of many models would exhaust dynamo's recompile limit, then silently run eager
        torch._dynamo.reset()  # once per row: resetting between the two models would recompile inside the timing
    for name, build in builders.items():
        before = _allocated(setup.dev)
        torch.manual_seed(0)
        model = build()
        if model is None:
            continue
        out[f"{name}_params"] = sum(p.numel() for p in model.parameters())
        if name == "normbench":
            out["train_mem"] = train_memory_mib(model.to(setup.dev), setup)
        steps[name] = make_train_step(model.to(setup.dev), setup)
        out[f"{name}_mem"] = warm_up(steps[name], setup, it.warmup, before)
    if "timm" in steps and out["normbench_params"] != out["timm_params"]:
        raise RuntimeError(f"{layer}: normbench has {out['normbench_params']} parameters, timm "
                           f"{out['timm_params']}; the configurations differ, so the comparison would be void")
    out.update({f"{k}_step_ms": v for k, v in time_interleaved(steps, setup.dev, it.steps, it.repeats).items()})
    return out


def compile_room(setup: StepSetup, models: int) -> AbstractContextManager[Any]:
    """Room for `models` compiled models timed side by side: a fresh dynamo whose recompile limits fit them all (past
    the default 8 per code object it would silently run the rest eagerly, against a compiled baseline)."""
    if not setup.compile:
        return nullcontext()
    torch._dynamo.reset()
    return torch._dynamo.config.patch(recompile_limit=max(8, 2 * models),
                                      accumulated_recompile_limit=max(256, 8 * models))


def interleaved_steps(layers: Sequence[str], depth: int, dim: int, setup: StepSetup,
                      it: Iters) -> dict[str, dict[str, float]]:
    """`step_times` for every layer at one (depth, dim) at once, without timm: all the models are built, then timed
    A B C ... A B C ..., so that a loaded machine's drift hits every layer alike (`run_bench(interleave=True)`: a
    block family's cost against layernorm, scripts/bench_families.py)."""
    steps: dict[str, Callable[[], None]] = {}
    out: dict[str, dict[str, float]] = {}
    with compile_room(setup, len(layers)):
        for layer in layers:
            before = _allocated(setup.dev)
            torch.manual_seed(0)
            model = build_normbench(layer, depth, dim).to(setup.dev)
            out[layer] = {"normbench_params": sum(p.numel() for p in model.parameters()),
                          "train_mem": train_memory_mib(model, setup)}
            steps[layer] = make_train_step(model, setup)
            out[layer]["normbench_mem"] = warm_up(steps[layer], setup, it.warmup, before)
        for layer, ms in time_interleaved(steps, setup.dev, it.steps, it.repeats).items():
            out[layer]["normbench_step_ms"] = ms
    return out


# --- one row, the table, the files -------------------------------------------------------------------------------

def bench_row(layer: str, depth: int, dim: int, setup: StepSetup, it: Iters, peak: float | None,
              steps: dict[str, float] | None = None) -> dict[str, Any]:
    """One table row; `steps`, when given, is the layer's share of `interleaved_steps` (then no timm comparison)."""
    ops = op_times(layer, (setup.batch, (IMG_SIZE // PATCH_SIZE) ** 2 + 1, dim), depth, setup.dev, it)
    st = steps if steps is not None else step_times(layer, depth, dim, setup, it)
    step_ms, timm_ms = st["normbench_step_ms"], st.get("timm_step_ms", math.nan)
    tflops = vit_train_flops(setup.batch, depth, dim) / (step_ms / 1e3) / 1e12
    return {
        "layer": layer, "depth": depth, "dim": dim, "batch": setup.batch, "params": st["normbench_params"],
        **{k: ops.get(k, math.nan) for k in ("norm_op_ms", "gate_op_ms", "op_ms", "layernorm_op_ms",
                                             "op_vs_layernorm")},
        "step_ms": step_ms, "images_per_s": setup.batch / (step_ms / 1e3), "tflops": tflops,
        "mfu_pct": 100 * tflops * 1e12 / peak if peak else math.nan, "peak_mem_mib": st["normbench_mem"],
        "timm_step_ms": timm_ms, "timm_images_per_s": setup.batch / (timm_ms / 1e3), "vs_timm": step_ms / timm_ms,
        "train_mem_mib": st["train_mem"],
    }


def device_slug(dev: torch.device) -> str:
    """'cpu', or the GPU's name in lower case with runs of other characters as '-': 'nvidia-h100-80gb-hbm3'."""
    if dev.type != "cuda":
        return dev.type
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(dev).lower()).strip("-")


def torch_version() -> str:
    return torch.__version__.split("+")[0]  # 2.15.0+cu132 -> 2.15.0


def machine_header(setup: StepSetup, peak: float | None) -> str:
    """The report's machine line (report/machine.py) for the benchmarked device, then what bench adds: the OS, the
    CPUs and how busy they were (a busy core stalls each multi-threaded region), torch threads, the FLOP/s peak
    and the step setup."""
    peak_note = f"{peak / 1e12:.0f} TFLOP/s bf16 peak" if peak else "peak FLOP/s unknown, so MFU is blank"
    return (f"{machine_line(setup.dev)}. {platform.platform()}, {os.cpu_count()} CPUs{load_note()}, "
            f"torch threads: {torch.get_num_threads()}; {peak_note}. Batch {setup.batch}, "
            f"compile {'on' if setup.compile else 'off'}, amp {'bf16' if setup.amp else 'off (fp32)'}.")


_DECIMALS = {"norm_op_ms": 4, "gate_op_ms": 4, "op_ms": 4, "layernorm_op_ms": 4, "op_vs_layernorm": 3,
             "step_ms": 2, "images_per_s": 1, "tflops": 4, "mfu_pct": 2, "peak_mem_mib": 1, "timm_step_ms": 2,
             "timm_images_per_s": 1, "vs_timm": 3, "train_mem_mib": 1, "step_vs_layernorm": 3,
             "mem_vs_layernorm": 3}


def bench_table(frame: pd.DataFrame) -> str:
    """The markdown table of bench rows: each column rounded to its decimals, blank where there is no value."""
    shown = frame.round(_DECIMALS).astype(object)
    return markdown_table(shown.where(frame.notna(), ""))


def versus_layernorm(frame: pd.DataFrame) -> pd.DataFrame:
    """`step_vs_layernorm`, `mem_vs_layernorm`: each row's step time and memory (the CUDA peak where measured, else
    `train_mem_mib`) over the layernorm row's at the same depth and dim; blank without one."""
    frame = frame.copy()
    memory = frame["peak_mem_mib"].where(frame["peak_mem_mib"].notna(), frame["train_mem_mib"])
    base = frame.assign(memory=memory)[frame["layer"] == "layernorm"].drop_duplicates(["depth", "dim"])
    base = base.set_index(["depth", "dim"])
    keys = pd.MultiIndex.from_frame(frame[["depth", "dim"]])
    frame["step_vs_layernorm"] = frame["step_ms"].to_numpy() / base["step_ms"].reindex(keys).to_numpy()
    frame["mem_vs_layernorm"] = memory.to_numpy() / base["memory"].reindex(keys).to_numpy()
    return frame


def write_outputs(rows: list[dict[str, Any]], out_dir: Path, stem: str, header: str) -> tuple[Path, Path, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if frame["step_ms"].notna().any() and "train_mem_mib" in frame:
        frame = versus_layernorm(frame)
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    frame.to_csv(csv_path, index=False)  # NaN (no gate, no timm counterpart, unknown peak) -> blank
    table = bench_table(frame)
    md_path.write_text(f"# normbench bench\n\n{header}\n\n{table}\n", encoding="utf-8")
    return csv_path, md_path, table


def run_bench(layers: Sequence[str] | None = None, depths: Iterable[int] = (12,), dims: Iterable[int] = (192,),
              batch_size: int | None = None, device: str | torch.device = "auto", compile_mode: str = "auto",
              out_dir: Path | str = Path("runs"), *, warmup: int | None = None, steps: int | None = None,
              op_iters: int | None = None, repeats: int | None = None, interleave: bool = False) -> pd.DataFrame:
    """Benchmark each layer at each (depth, dim); write and print the table; return it as a DataFrame.

    Args:
        layers: registry names (default: the six mission layers).
        depths, dims: model depths and embed dims; every combination is measured.
        batch_size: images per step (default 256 on CUDA, 64 on CPU).
        device: "auto" (CUDA if available), "cpu", "cuda" or "cuda:N".
        compile_mode: "auto" (on for CUDA, off for CPU), "on" or "off"; torch.compile of the model's forward.
        out_dir: folder for bench-<device>-<torch version>.csv and .md (default runs/, not committed).
        warmup, steps, op_iters, repeats: override the device's defaults (see `Iters`).
        interleave: time the layers of each (depth, dim) against each other, A B C ... (`interleaved_steps`),
            instead of each against timm's ViT; for comparing layers on a loaded machine.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.set_float32_matmul_precision("high")
    default = Iters.for_device(dev)
    it = Iters(warmup=default.warmup if warmup is None else warmup, steps=steps or default.steps,
               op_iters=op_iters or default.op_iters, repeats=repeats or default.repeats)
    on = compile_mode == "on" or (compile_mode == "auto" and dev.type == "cuda")
    setup = StepSetup(dev=dev, batch=batch_size or (256 if dev.type == "cuda" else 64), amp=dev.type == "cuda",
                      compile=on)
    peak = peak_flops(dev)
    header = machine_header(setup, peak)  # before measuring: the date and load it reports are the start's
    stem = f"bench-{device_slug(dev)}-{torch_version()}"
    rows: list[dict[str, Any]] = []
    for depth in depths:
        for dim in dims:
            shared = interleaved_steps(layers or MISSION_LAYERS, depth, dim, setup, it) if interleave else {}
            for layer in layers or MISSION_LAYERS:
                rows.append(bench_row(layer, depth, dim, setup, it, peak, shared.get(layer)))
                # after every row: a run cut short (a time limit, a lost GPU lease) keeps what it measured
                csv_path, md_path, table = write_outputs(rows, Path(out_dir), stem, header)
    print(f"{header}\n\n{table}\n\nwrote {csv_path} and {md_path}")
    return pd.DataFrame(rows, columns=COLUMNS)
