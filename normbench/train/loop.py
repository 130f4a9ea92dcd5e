"""One cell of training: build -> fit -> `CellResult`. Knows nothing of MLflow, Optuna or the suite.

`build_fit` builds what a cell trains with, `train_epoch` runs one epoch's optimizer steps, `train_cell` drives the
epochs, evaluates and returns the result. The step loop has no host syncs except every `log_interval` steps and at
the end of an epoch (one `.item()` for the epoch's loss); a divergent loss ends the cell with status "diverged".
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from torch import nn

import normbench
from normbench import stopping
from normbench.contracts.recipe import CellConfig, TrainConfig
from normbench.contracts.results import CellResult, EpochRecord, Status
from normbench.data import DataBundle, build_data
from normbench.errors import SuiteError
from normbench.model.init_images import init_images_for
from normbench.model.vit import NormbenchViT
from normbench.train import fastpath
from normbench.train.aux_losses import from_config as aux_losses_from_config
from normbench.train.cell_state import CellProgress, EpochSoFar
from normbench.train.checkpoint import Keeper
from normbench.train.checkpoint import restore as restore_checkpoint
from normbench.train.device import device_name, resolve_device
from normbench.train.distributed import Dist, all_sum, broadcast, wrap_ddp
from normbench.train.optimizer import build_optimizer
from normbench.train.schedule import warmup_cosine
from normbench.train.telemetry import BlockTelemetry

EpochCallback = Callable[[EpochRecord], bool | None]  # gets the epoch's record; True stops the cell (pruning)


def build_model(cell: CellConfig, data: DataBundle) -> NormbenchViT:
    m = asdict(cell.model)
    m.pop("img_size")
    return NormbenchViT(img_size=data.img_size, in_chans=data.in_chans, num_classes=data.num_classes,
                        init_images=init_images_for(cell.model.layer, data), **m)


def mixup_on(tc: TrainConfig) -> bool:
    return tc.mixup > 0 or tc.cutmix > 0


@dataclass
class Fit:
    """Everything one cell trains with, built once by `build_fit`; `step` counts optimizer steps across epochs."""

    tc: TrainConfig
    data: DataBundle
    dev: torch.device
    dist: Dist | None
    model: NormbenchViT
    parallel: nn.Module          # the model, or its DDP wrapper
    forward: Callable[[torch.Tensor], torch.Tensor]  # `parallel`, compiled when asked
    optimizer: torch.optim.Optimizer
    aux: Any                     # opt-in auxiliary losses (LearnableScaler recipe); None when off
    autocast: Callable[[], Any]
    mixup: Mixup | None
    loss_fn: nn.Module
    telemetry: BlockTelemetry
    steps_per_epoch: int
    micro_per_epoch: int         # micro-batches trained per epoch: whole accumulation groups only
    max_loss: float
    step: int = 0
    progress: CellProgress = field(default_factory=CellProgress)  # the epochs so far, over every attempt
    keeper: Keeper | None = None  # writes the cell's checkpoints (rank 0 only); None: none are written
    started: float = field(default_factory=time.perf_counter)  # this attempt's start

    def attempt_seconds(self) -> float:
        return time.perf_counter() - self.started


@dataclass
class EpochTrained:
    """What one epoch's training steps measured (before evaluation)."""

    train_loss: float            # mean over the trained micro-batches and ranks
    lr: float                    # the schedule's value at the epoch's last step
    grad_norm_sum: torch.Tensor  # pre-clipping global norms summed over the steps, still on the device
    optimizer_steps: int
    images: int                  # over all ranks
    seconds: float


def build_fit(cell: CellConfig, device: str | torch.device, data: DataBundle | None, dist: Dist | None) -> Fit:
    """Seed, data, model, optimizer, compile and autocast choices, loss: what `train_cell` trains with."""
    tc = cell.train
    if dist is not None and mixup_on(tc) and (tc.batch_size // dist.world) % 2:
        raise SuiteError(f"train.batch_size: mixup/cutmix pair images within a process's {tc.batch_size // dist.world}"
                         f"-image share of the batch, which must be even; use a multiple of {2 * dist.world}")
    dev = dist.device(device) if dist else resolve_device(device)
    on_cuda = dev.type == "cuda"
    torch.manual_seed(tc.seed)
    random.seed(tc.seed)  # timm's Mixup draws from NumPy's and Python's generators: seeded too, so a mixup cell
    np.random.seed(tc.seed)  # repeats (and resumes from a checkpoint) exactly, as every other cell does
    if on_cuda:
        torch.set_float32_matmul_precision("high")
    shard = (dist.rank, dist.world) if dist else (0, 1)
    data = data or build_data(cell.data, batch_size=tc.batch_size, device=dev, seed=tc.seed,
                              img_size=cell.model.img_size, shard=shard)
    model = build_model(cell, data).to(dev)
    fastpath.set_attention_path(model, dev)
    optimizer = build_optimizer(model, tc, dev)  # Muon on the hidden matrices and AdamW on the rest, or timm's
    aux = aux_losses_from_config(model, tc)
    parallel = model if dist is None else wrap_ddp(model, dev)
    forward = parallel
    if tc.uses_compile(on_cuda):
        # a fresh dynamo per cell: a worker's many models would otherwise exhaust its recompile limit, after which
        # dynamo silently runs the rest eagerly, and a cell's speed would depend on the cells before it
        torch._dynamo.reset()
        forward = torch.compile(parallel)
    amp = tc.uses_bf16(on_cuda)
    autocast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if amp else nullcontext

    mixup = (Mixup(mixup_alpha=tc.mixup, cutmix_alpha=tc.cutmix, label_smoothing=tc.label_smoothing,
                   num_classes=data.num_classes) if mixup_on(tc) else None)
    loss_fn: nn.Module = SoftTargetCrossEntropy() if mixup else fastpath.loss_function(tc.label_smoothing)
    max_loss = tc.max_loss if tc.max_loss is not None else 10.0 * math.log(data.num_classes)
    if tc.grad_accum_steps > 1 and len(data.train) < tc.grad_accum_steps:
        raise SuiteError(f"train.grad_accum_steps: {tc.grad_accum_steps} micro-batches per optimizer step, but an "
                         f"epoch has only {len(data.train)} training batches per process: no step would ever run")
    steps_per_epoch = max(1, len(data.train) // tc.grad_accum_steps)
    # Only the micro-batches that form full accumulation groups are trained (nanoGPT's `for micro_step in
    # range(grad_accum)` in effect): a trailing partial group would otherwise leave its gradients in .grad, to be
    # summed into the next epoch's first step (and under DDP it ran under no_sync, never all-reduced). Skipping it
    # keeps every step one full group of this epoch's data, and the epoch's loss and images count what was trained.
    return Fit(tc=tc, data=data, dev=dev, dist=dist, model=model, parallel=parallel, forward=forward,
               optimizer=optimizer, aux=aux, autocast=autocast, mixup=mixup, loss_fn=loss_fn,
               telemetry=BlockTelemetry(model),  # records nothing unless a step is observed
               steps_per_epoch=steps_per_epoch, micro_per_epoch=steps_per_epoch * tc.grad_accum_steps,
               max_loss=max_loss)


def train_epoch(fit: Fit, epoch: int, so_far: EpochSoFar | None = None) -> EpochTrained:
    """One epoch's optimizer steps (the rest of them, from `so_far`, when a checkpoint cut it short). No host sync
    but the periodic divergence check and the epoch's loss."""
    tc, dist, telemetry = fit.tc, fit.dist, fit.telemetry
    trainable = [p for p in fit.model.parameters() if p.requires_grad]
    total_steps = fit.steps_per_epoch * tc.epochs
    warmup_steps = round(tc.warmup_epochs * fit.steps_per_epoch)
    fit.model.train()
    fit.data.train.set_epoch(epoch)
    loss_sum = torch.zeros((), device=fit.dev)
    grad_norm_sum = torch.zeros((), device=fit.dev)
    micro, optimizer_steps, images = 0, 0, 0
    lr, before = tc.lr, 0.0
    if so_far is not None:
        fit.data.train.resume_at(so_far.micro, so_far.generator)  # type: ignore[attr-defined]
        loss_sum, grad_norm_sum = so_far.loss_sum, so_far.grad_norm_sum
        micro, optimizer_steps, images, lr, before = (so_far.micro, so_far.optimizer_steps, so_far.images,
                                                      so_far.lr, so_far.seconds)
    t0 = time.perf_counter()
    for x, y in islice(fit.data.train, fit.micro_per_epoch - micro):
        # under torchrun a stop is decided once per epoch, for every rank alike (train_cell); alone, between
        # optimizer steps a stop first writes a checkpoint of the epoch so far (when the cell keeps them)
        if dist is None and stopping.requested() and (fit.keeper is None or micro % tc.grad_accum_steps == 0):
            if fit.keeper is not None:
                fit.keeper.save(fit, EpochSoFar(
                    epoch=epoch, micro=micro, optimizer_steps=optimizer_steps, images=images, loss_sum=loss_sum,
                    grad_norm_sum=grad_norm_sum, lr=lr, seconds=before + time.perf_counter() - t0,
                    generator=fit.data.train.position()))  # type: ignore[attr-defined]
            stopping.check()
        if fit.mixup is not None:
            x, y = fit.mixup(x, y)
        micro += 1
        steps_now = micro % tc.grad_accum_steps == 0
        observed = tc.telemetry_every > 0 and fit.step % tc.telemetry_every == 0  # hooks run eagerly, uncompiled
        # under DDP only the micro-batch that ends an accumulation all-reduces; the others keep their grads local
        with fit.parallel.no_sync() if dist is not None and not steps_now else nullcontext():
            with fit.autocast(), telemetry.observe() if observed else nullcontext():
                loss = fit.loss_fn((fit.parallel if observed else fit.forward)(x), y)
                if fit.aux is not None:
                    loss = loss + fit.aux.pop()
            (loss / tc.grad_accum_steps).backward()
        loss_sum += loss.detach()
        images += x.shape[0]
        if not steps_now:
            continue
        for group in fit.optimizer.param_groups:  # a group tagged warmup=False (ngpt's recipe) skips the warmup
            lr = warmup_cosine(fit.step, total_steps=total_steps, warmup_steps=warmup_steps * group.get("warmup", True),
                               lr=tc.lr, warmup_lr=tc.warmup_lr, min_lr=tc.min_lr)
            group["lr"] = lr * group.get("lr_scale", 1.0)
        if observed:
            telemetry.before_update()
        grad_norm_sum += nn.utils.clip_grad_norm_(trainable, tc.clip_grad or math.inf)
        fit.optimizer.step()
        for hook in fit.model.plan.after_step:  # a block family's own (nGPT renormalises every weight matrix)
            hook(fit.model)
        if observed:
            telemetry.after_update(fit.step)
        fit.optimizer.zero_grad(set_to_none=True)
        fit.step += 1
        optimizer_steps += 1
        # the periodic sync; summed over ranks so that all of them stop together
        if fit.step % tc.log_interval == 0 and not math.isfinite(all_sum(loss_sum.clone(), dist).item()):
            break
    world = dist.world if dist else 1
    train_loss = all_sum(loss_sum, dist).item() / world / max(1, micro)  # the epoch's sync
    telemetry.collect()
    return EpochTrained(train_loss=train_loss, lr=lr, grad_norm_sum=grad_norm_sum, optimizer_steps=optimizer_steps,
                        images=images * world, seconds=before + time.perf_counter() - t0)


def train_cell(cell: CellConfig, device: str | torch.device = "auto", on_epoch: EpochCallback | None = None,
               data: DataBundle | None = None, dist: Dist | None = None, *, keeper: Keeper | None = None,
               resume: dict[str, Any] | None = None) -> CellResult:
    """Train one cell and return its metrics (normbench/contracts/results.py says what each field means).

    With `dist` (torchrun, normbench/train/distributed.py) every rank calls this with the same cell: each trains on
    its slice of every global batch under DistributedDataParallel, metrics are summed over ranks, and only rank 0's
    `on_epoch` runs (its pruning decision is sent to the others).

    An epoch trains the train loader's first `grad_accum_steps * (len // grad_accum_steps)` micro-batches: a
    trailing partial accumulation group is skipped, like a loader's drop_last (see `build_fit`). The result's
    `telemetry` holds per-block records of the observed steps (normbench/train/telemetry.py; [] when
    `train.telemetry_every` is 0). A divergent loss ends the cell with status "diverged" instead of raising.

    `keeper` (train/checkpoint.py; rank 0's only) writes checkpoints at epoch ends on its interval and, alone, when
    a stop is requested between optimizer steps; `resume` (a checkpoint `checkpoint.read` accepted, the same on
    every rank) continues the cell from it: on CPU the result is the uninterrupted cell's, bit for bit.
    """
    t_start = time.perf_counter()
    fit = build_fit(cell, device, data, dist)
    fit.started, fit.progress.world = t_start, dist.world if dist else 1
    so_far = restore_checkpoint(fit, resume) if resume is not None else None
    fit.keeper = keeper
    progress, history = fit.progress, fit.progress.history
    status: Status = "ok"
    threads: list[int] = []  # torch's intra-op threads as each epoch starts (the CPU share may change them)
    for epoch in range(progress.next_epoch, fit.tc.epochs):
        if not threads or threads[-1] != torch.get_num_threads():
            threads.append(torch.get_num_threads())
        trained = train_epoch(fit, epoch, so_far)
        so_far = None
        progress.train_seconds += trained.seconds
        progress.images_seen += trained.images
        images_seen = progress.images_seen
        speed = trained.images / trained.seconds
        if not math.isfinite(trained.train_loss) or trained.train_loss > fit.max_loss:
            status = "diverged"
            history.append(EpochRecord(epoch=epoch, train_loss=trained.train_loss, val_top1=float("nan"),
                                       lr=trained.lr, grad_norm=float("nan"), images_per_sec=speed,
                                       step=fit.step, images=images_seen))
            break
        record = EpochRecord(epoch=epoch, train_loss=trained.train_loss, val_top1=evaluate(fit), lr=trained.lr,
                             grad_norm=trained.grad_norm_sum.item() / max(1, trained.optimizer_steps),
                             images_per_sec=speed, step=fit.step, images=images_seen)
        history.append(record)
        progress.next_epoch = epoch + 1
        if keeper is not None and stopping.requested():  # SIGTERM: keep this epoch before giving the cell back
            keeper.save(fit)
        if dist is None:
            stopping.check()
            if on_epoch is not None and on_epoch(record):
                status = "pruned"
                break
            if keeper is not None and progress.next_epoch < fit.tc.epochs and keeper.due():
                keeper.save(fit)
            continue
        # torchrun: rank 0 decides for every rank. Whatever stops it (pruning, a lost claim, SIGTERM) is sent
        # before it raises, so the other ranks never wait in a collective that rank 0 has left.
        decision, error = _main_rank_decision(on_epoch, record, dist)
        decision = broadcast(decision, dist)
        if error is not None:
            raise error
        if decision == "abandon":
            raise CellAbandoned("rank 0 stopped this cell")
        if decision == "prune":
            status = "pruned"
            break
        if keeper is not None and progress.next_epoch < fit.tc.epochs and keeper.due():  # rank 0 writes alone
            keeper.save(fit)

    # the test split is read once, at the final epoch, and only to report: nothing above chose anything with it
    test_top1 = evaluate(fit, split="test") if status == "ok" else float("nan")
    return cell_result(fit, cell, status, test_top1, threads, keeper)


def cell_result(fit: Fit, cell: CellConfig, status: Status, test_top1: float, threads: list[int],
                keeper: Keeper | None, fused_group: int = 1) -> CellResult:
    """A trained cell's `CellResult` from its fit (and its weights kept, when its recipe asks): one rule for a cell
    trained alone (`train_cell`) or in a fused group (train/fused.py)."""
    progress = fit.progress
    history = progress.history
    val = [h["val_top1"] for h in history if math.isfinite(h["val_top1"])]
    if keeper is not None and status != "diverged":  # train.keep_weights: final
        keeper.keep_weights(fit, cell, {"status": status, "test_top1": test_top1, "val_top1": history[-1]["val_top1"],
                                        "epochs_run": len(history)})
    return CellResult(
        status=status,
        best_val_top1=max(val, default=0.0),
        final_val_top1=val[-1] if val else 0.0,
        val_top1=val[-1] if status == "ok" and val else float("nan"),  # final epoch
        test_top1=test_top1,  # final epoch
        best_val_epoch=max(range(len(val)), key=val.__getitem__) if val else -1,
        **fit.data.sizes(),  # train_size, val_size, test_size
        num_classes=fit.data.num_classes,
        train_loss=history[-1]["train_loss"] if history else float("nan"),
        epochs_run=len(history),
        images_per_sec=progress.images_seen / progress.train_seconds if progress.train_seconds else 0.0,
        params=sum(p.numel() for p in fit.model.parameters()),
        seconds=progress.seconds_before + fit.attempt_seconds(),  # a resumed cell counts its earlier attempts
        history=history,
        telemetry=fit.telemetry.records(),
        device=device_name(fit.dev),
        torch_version=torch.__version__,
        timm_version=timm.__version__,
        normbench_version=normbench.__version__,
        torch_threads="/".join(map(str, threads)),
        fused_group=fused_group,
    )


class CellAbandoned(Exception):
    """Raised on a torchrun rank whose rank 0 stopped the cell it was training (a lost claim, SIGTERM)."""


def _main_rank_decision(on_epoch: EpochCallback | None, record: EpochRecord,
                        dist: Dist) -> tuple[str | None, BaseException | None]:
    """Rank 0's call at an epoch's end: ("prune" | "abandon" | None, the error rank 0 raises after sending it)."""
    if not dist.is_main:
        return None, None
    try:
        stopping.check()
        return ("prune" if on_epoch is not None and on_epoch(record) else None), None
    except BaseException as error:  # noqa: B036 - sent to the other ranks first, then raised unchanged
        return "abandon", error


@torch.inference_mode()  # no autograd bookkeeping at all (no_grad still tracks versions and views)
def evaluate(fit: Fit, split: str = "val") -> float:
    """Top-1 accuracy in percent on `split` ("val", the default, or "test"), summed over ranks; one host sync at
    the end. Leaves the model in eval."""
    fit.model.eval()
    correct = torch.zeros((), dtype=torch.long, device=fit.dev)
    total = 0
    for x, y in getattr(fit.data, split):
        with fit.autocast():
            correct += (fit.forward(x).argmax(dim=-1) == y).sum()
        total += y.shape[0]
    correct, total = all_sum(torch.stack([correct, correct.new_tensor(total)]), fit.dist).tolist()
    return 100.0 * correct / max(1, total)
