"""One optimizer step of every member of a fused group (train/fused.py), with no host sync: eager, compiled, or
replayed as a CUDA graph.

The step: every member's forward and loss (`functional_call` under `vmap`), one backward into the flat gradients
(train/stacked.py), then one update over the flat rows (`update`): the loss summed per member and its divergence
mask (`finite`, a member whose loss went non-finite stops updating; the host reads the mask only at its periodic
sync), per-member clipping (two kernels, against (K,) limits made once on the device), the vectorised AdamW
(train/stacked_adamw.py) and a block family's after-step hook (nGPT renormalises every weight matrix) once over the
stack, under vmap. Nothing in it reads a device value on the host or copies host data to the device
(tests/train/test_fused_step.py checks the ops one step dispatches), so on a GPU the host queues steps ahead of the
device, and the whole step can be captured as one CUDA graph (`GraphedStep`).

Compiled (`torch.compile`), the forward and backward and the update are each one compiled function per row shape
and group size, kept in a module-level cache (`STEPS`) across groups: the next group of that shape reuses them
instead of compiling again. A compiled function is traced through a template model built for its shape (the members'
tensors replace its own in every call), so it holds no group's tensors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from timm.layers import Attention
from torch import nn
from torch.func import functional_call, vmap
from torch.nn.utils.stateless import _reparametrize_module

from normbench.contracts.recipe import CellConfig
from normbench.train.loop import build_model
from normbench.train.stacked import Stacked, clip_rows_
from normbench.train.stacked_adamw import StackedAdamW, adamw_step

Hook = Callable[[nn.Module], None]
MEMBER_KEYS = frozenset({"train.lr", "train.seed", "train.epochs", "train.warmup_epochs"})  # fusion_rules' own
RECOMPILE_LIMIT = 64  # compiled step functions a worker keeps (row shapes x group sizes), above dynamo's default 8


def explicit_attention(model: nn.Module) -> None:
    """timm's explicit softmax(q kᵀ) v in every Attention: torch's fused kernels lack vmap rules."""
    for module in model.modules():
        if isinstance(module, Attention):
            module.fused_attn = False


def run_hooks(base: nn.Module, hooks: Sequence[Hook], params: dict[str, torch.Tensor]) -> None:
    """The after-step hooks of every member at once: `params` (K, ...) stand in for `base`'s own under vmap, and a
    hook's in-place writes land in each member's slice."""
    def one(member: dict[str, torch.Tensor]) -> tuple[()]:
        with _reparametrize_module(base, member):
            for hook in hooks:
                hook(base)
        return ()

    with torch.no_grad():
        vmap(one)(params)


@dataclass
class StepKit:
    """The functions of one row shape and group size: the module they run, the vmapped loss (per member: its own
    batch) and logits (the members share a batch), the update; compiled or not."""

    base: nn.Module
    loss: Callable[..., torch.Tensor]
    logits: Callable[..., torch.Tensor]
    update: Callable[..., None]
    member_loss: Callable[..., torch.Tensor]  # one member's, unvmapped (telemetry observes it under its hooks)
    compiled: bool = False


def make_kit(base: nn.Module, loss_fn: nn.Module, hooks: Sequence[Hook], compiled: bool,
             backend: str = "inductor") -> StepKit:
    """The step's functions over `base`'s code (its own tensors never used: every call passes the members')."""
    explicit_attention(base)

    def member_loss(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: torch.Tensor,
                    y: torch.Tensor) -> torch.Tensor:
        return loss_fn(functional_call(base, (params, buffers), (x,)), y)

    def member_logits(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                      x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (params, buffers), (x,))

    def step_update(flat: torch.Tensor, grad: torch.Tensor, losses: torch.Tensor, acc: dict[str, torch.Tensor],
                    opt: dict[str, torch.Tensor], spans: dict[str, tuple[int, int, tuple[int, ...]]],
                    hyper: tuple[float, float | None, float]) -> None:
        update(flat, grad, losses, acc, opt, spans, hyper, base, hooks)

    loss, logits = vmap(member_loss), vmap(member_logits, in_dims=(0, 0, None))
    if compiled:
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        loss, logits = torch.compile(loss, backend=backend), torch.compile(logits, backend=backend)
        step_update = torch.compile(step_update, backend=backend)  # type: ignore[assignment]
    return StepKit(base, loss, logits, step_update, member_loss, compiled)


def update(flat: torch.Tensor, grad: torch.Tensor, losses: torch.Tensor, acc: dict[str, torch.Tensor],
           opt: dict[str, torch.Tensor], spans: dict[str, tuple[int, int, tuple[int, ...]]],
           hyper: tuple[float, float | None, float], base: nn.Module, hooks: Sequence[Hook]) -> None:
    """After the backward: the losses into the sums and the divergence mask, per-member clipping, AdamW over the
    members still finite, the after-step hooks over the stack, the gradients zeroed. All on the device."""
    losses = losses.detach().float()
    acc["finite"].logical_and_(torch.isfinite(losses))
    acc["loss_sum"].add_(losses)
    acc["grad_norm_sum"].add_(clip_rows_(grad, acc["limits"]))
    adamw_step(flat, grad, acc["finite"], opt, *hyper)
    if hooks:
        k = flat.shape[0]
        run_hooks(base, hooks, {name: flat[:, a:b].view(k, *shape) for name, (a, b, shape) in spans.items()})
    grad.zero_()


# ---------------------------------------------------------------------------------------- the compiled cache

STEPS: dict[tuple[Any, ...], StepKit] = {}  # (row shape, K, device, backend) -> its compiled functions


def shape_key(cell: CellConfig, k: int, dev: torch.device, backend: str) -> tuple[Any, ...]:
    """What a compiled step depends on: the recipe but what members may differ in, the group size, the device."""
    recipe = {key: v for key, v in cell.flat().items() if key not in MEMBER_KEYS}
    return json.dumps(recipe, sort_keys=True, default=str), k, str(dev), backend


def compiled_kit(cell: CellConfig, k: int, dev: torch.device, build_base: Callable[[], nn.Module],
                 loss_fn: nn.Module, hooks: Sequence[Hook], backend: str = "inductor") -> StepKit:
    """The cached compiled functions of `cell`'s row shape at group size `k`, made on first use (`build_base`: a
    template model of that shape, built once for the cache)."""
    key = shape_key(cell, k, dev, backend)
    if key not in STEPS:
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):  # the members' RNG untouched
            base = build_base()
        STEPS[key] = make_kit(base, loss_fn, hooks, compiled=True, backend=backend)
    return STEPS[key]


# ------------------------------------------------------------------------------------------------- the step

class FusedStep:
    """One optimizer step of the stacked members: `step(x, y)` with x (K, B, ...), y (K, B). Device state: the
    epoch's loss and pre-clipping norm sums, the divergence mask, the clipping limits (all (K,))."""

    def __init__(self, kit: StepKit, stacked: Stacked, adamw: StackedAdamW, clip: Sequence[float],
                 autocast: Callable[[], Any]) -> None:
        self.kit, self.stacked, self.adamw, self.autocast = kit, stacked, adamw, autocast
        dev, k = stacked.flat.device, stacked.k
        self.acc = {"loss_sum": torch.zeros(k, device=dev), "grad_norm_sum": torch.zeros(k, device=dev),
                    "finite": torch.ones(k, dtype=torch.bool, device=dev),
                    "limits": torch.tensor([c if c else math.inf for c in clip], dtype=stacked.flat.dtype,
                                           device=dev)}  # once: a host-to-device copy every step would sync
        self.spans = {name: (a, b, tuple(stacked.params[name].shape[1:])) for name, (a, b) in stacked.spans.items()}

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        with self.autocast():
            losses = self.kit.loss(self.stacked.params, self.stacked.buffers, x, y)
        losses.sum().backward()
        self.update(losses)

    def update(self, losses: torch.Tensor) -> None:
        self.kit.update(self.stacked.flat, self.stacked.flat_grad, losses, self.acc, self.adamw.tensors(),
                        self.spans, self.adamw.hyper())

    def start_epoch(self, loss_sum: torch.Tensor | None = None, grad_norm_sum: torch.Tensor | None = None) -> None:
        """Zero the epoch's sums (in place: a captured graph reads these tensors), or set them to an epoch cut
        short's."""
        self.acc["loss_sum"].copy_(loss_sum if loss_sum is not None else torch.zeros_like(self.acc["loss_sum"]))
        self.acc["grad_norm_sum"].copy_(grad_norm_sum if grad_norm_sum is not None
                                        else torch.zeros_like(self.acc["grad_norm_sum"]))


class GraphedStep:
    """A FusedStep captured as one CUDA graph after `WARMUP` eager steps (on a side stream, as torch's whole-network
    capture asks), then replayed: a step is a copy of the batch into the graph's input and one launch. The members,
    their tensors and the step's device state stay where they were captured; the group captures again when its
    members change (train/fused.py restacks)."""

    WARMUP = 3

    def __init__(self, step: FusedStep) -> None:
        self.step = step
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.graph is None and self.calls < self.WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step(x, y)
            torch.cuda.current_stream().wait_stream(side)
            self.calls += 1
            return
        if self.graph is None:
            self.static = (x.clone(), y.clone())
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.step(*self.static)
        else:
            assert self.static is not None
            if x.shape != self.static[0].shape or y.shape != self.static[1].shape:  # a batch of another size
                self.step(x, y)
                return
            self.static[0].copy_(x)
            self.static[1].copy_(y)
        self.graph.replay()


def autocast_for(dev: torch.device, bf16: bool, graphs: bool) -> Callable[[], Any]:
    """The members' autocast (bf16 where their recipe asks); without its cast cache under a CUDA graph, whose
    capture cannot keep it."""
    if not bf16:
        return nullcontext
    return lambda: torch.autocast(dev.type, dtype=torch.bfloat16, cache_enabled=not graphs)


def template_builder(cell: CellConfig, data: Any, dev: torch.device) -> Callable[[], nn.Module]:
    """A model of `cell`'s shape for the compiled cache (its init is never trained: the members' tensors replace
    it); built as `build_fit` builds a member's."""
    def build() -> nn.Module:
        return build_model(cell, data).to(dev)
    return build
