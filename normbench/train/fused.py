"""Many cells, one model: a group of cells that differ only in lr and seed trains as one vmapped model.

Each member is built exactly as `train_cell` builds a cell (train/loop.py `build_fit`: its own seed's init and data
order, its own optimizer and schedule). Its parameters then move into stacked (K, ...) tensors and stay aliased to
their slice (train/stacked.py), so the member's optimizer, after-step hooks, checkpoints and kept weights act on its
own tensors, unchanged. One step runs every member's forward and backward at once (`functional_call` under `vmap`);
each member's gradient is clipped by its own norm and stepped by its own optimizer. No arithmetic crosses members: a
member that diverges is masked (never updated again) and the others' numbers are those of a group without it.

On a GPU a small cell's step is bound by kernel launches, so K members cost about one step (HFTA, Wang et al., MLSys
2021); on a CPU, which is compute-bound, fusing barely pays (docs/speed.md): `--fuse auto` fuses on CUDA only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
from timm.layers import Attention
from torch.func import functional_call, vmap

from normbench import stopping
from normbench.contracts.recipe import CellConfig
from normbench.contracts.results import CellResult, EpochRecord, Status
from normbench.errors import ClaimLostError
from normbench.train.cell_state import EpochSoFar
from normbench.train.checkpoint import Keeper
from normbench.train.checkpoint import restore as restore_checkpoint
from normbench.train.device import resolve_device
from normbench.train.fusion_rules import FusionRefused, refusal
from normbench.train.loop import EpochCallback, Fit, build_fit, cell_result
from normbench.train.schedule import warmup_cosine
from normbench.train.stacked import Stacked

TRAINING, DIVERGED, PRUNED, LOST = "training", "diverged", "pruned", "lost"


@dataclass
class Member:
    """One cell of a group: its fit (train/loop.py), callbacks and where it stands."""

    cell: CellConfig
    fit: Fit
    on_epoch: EpochCallback | None = None
    keeper: Keeper | None = None
    state: str = TRAINING
    lost: ClaimLostError | None = None  # why a LOST member stopped: its claim was taken over
    stepping: bool = True               # False once its loss went non-finite mid-epoch: masked, recorded at the end
    threads: list[int] = field(default_factory=list)

    @property
    def training(self) -> bool:
        return self.state == TRAINING


@dataclass
class MemberOutcome:
    """A member's end: its result (None when its claim was lost: another worker records that cell)."""

    result: CellResult | None
    lost: ClaimLostError | None = None


def train_group(cells: Sequence[CellConfig], device: str | torch.device = "auto", *,
                on_epoch: Sequence[EpochCallback | None] | None = None,
                keepers: Sequence[Keeper | None] | None = None,
                resumes: Sequence[dict[str, Any] | None] | None = None,
                on_end: Sequence[Callable[[MemberOutcome], None] | None] | None = None) -> list[MemberOutcome]:
    """Train `cells` as one fused model; returns each member's outcome in order. Each member's `on_epoch` is its
    cell's (True prunes that member alone; ClaimLostError stops it alone); `keepers` and `resumes` are per member
    as `train_cell`'s. A member that stops before the group (pruned, diverged, lost) gets its outcome at once, through
    its `on_end`, timed to its own end: the caller records it then, so a later crash of the group cannot lose it.
    Raises FusionRefused (train/fusion_rules.py) before training anything when the cells cannot be fused: the caller
    trains them one by one."""
    k = len(cells)
    on_epoch, keepers, resumes = on_epoch or [None] * k, keepers or [None] * k, resumes or [None] * k
    on_end = on_end or [None] * k
    dev = resolve_device(device)
    if (reason := refusal(cells, dev, resumes)) is not None:
        raise FusionRefused(reason)
    t_start = time.perf_counter()
    members = [Member(cell, build_fit(cell, dev, None, None), on_epoch[i], keepers[i]) for i, cell in enumerate(cells)]
    so_far: list[EpochSoFar | None] = [None] * k
    for i, (member, resume) in enumerate(zip(members, resumes, strict=True)):
        member.fit.started = t_start
        if resume is not None:  # refusal() checked that every member's checkpoint stands at one point
            so_far[i] = restore_checkpoint(member.fit, resume)
        member.fit.keeper = member.keeper
    group = _Group(members, dev)
    outcomes: list[MemberOutcome | None] = [None] * k
    for epoch in range(members[0].fit.progress.next_epoch, members[0].fit.tc.epochs):
        if not any(m.training for m in members):
            break
        for m in members:
            if m.training and (not m.threads or m.threads[-1] != torch.get_num_threads()):
                m.threads.append(torch.get_num_threads())
        group.epoch(epoch, so_far if so_far[0] is not None else None)
        so_far = [None] * k
        for i, m in enumerate(members):  # those that stopped this epoch end now, at their own time
            if not m.training and outcomes[i] is None:
                outcomes[i] = _outcome(m, group, float("nan"))
                if on_end[i] is not None:
                    on_end[i](outcomes[i])
    ended_ok = any(m.training for m in members)
    test = group.evaluate("test") if ended_ok else [float("nan")] * k  # once for all: read only for those ended ok
    return [outcomes[i] or _outcome(m, group, test[i]) for i, m in enumerate(members)]


class _Group:
    """The members' stacked parameters and the fused step, evaluation and epoch."""

    def __init__(self, members: list[Member], dev: torch.device) -> None:
        self.members, self.dev = members, dev
        self.base = members[0].fit.model  # the module whose code runs; every member's tensors go through it
        for module in self.base.modules():  # the explicit softmax(q kᵀ) v: torch's fused kernels lack vmap rules
            if isinstance(module, Attention):
                module.fused_attn = False
        self.stacked = Stacked([m.fit.model for m in members])
        fit = members[0].fit
        self.loss_fn, self.autocast = fit.loss_fn, fit.autocast
        self.step = fit.step  # the group's optimizer steps (every member resumed at the same one)
        self.first_step = True
        self._loss = vmap(self._member_loss)
        self._logits = vmap(self._member_logits, in_dims=(0, 0, None))

    def _member_loss(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(functional_call(self.base, (params, buffers), (x,)), y)

    def _member_logits(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                       x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.base, (params, buffers), (x,))

    # ------------------------------------------------------------------------------------------------- one epoch

    def epoch(self, epoch: int, so_far: list[EpochSoFar | None] | None) -> None:
        """Train every member one epoch, then record it for each (train_cell's epoch end, per member)."""
        members, k = self.members, len(self.members)
        tc0 = members[0].fit.tc
        self.base.train()
        for m in members:
            m.fit.data.train.set_epoch(epoch)
        loss_sum = torch.zeros(k, device=self.dev)
        grad_norm_sum = torch.zeros(k, device=self.dev)
        micro, before = 0, 0.0
        steps = [0] * k          # optimizer steps this epoch, per member (a masked member stops counting)
        images = [0] * k
        lrs = [m.fit.tc.lr for m in members]
        if so_far is not None:  # an epoch cut short: every member's checkpoint stands at one point (fusion_rules)
            states = [s for s in so_far if s is not None]
            for m, s in zip(members, states, strict=True):
                m.fit.data.train.resume_at(s.micro, s.generator)  # type: ignore[attr-defined]
            loss_sum = torch.stack([s.loss_sum.reshape(()) for s in states])
            grad_norm_sum = torch.stack([s.grad_norm_sum.reshape(()) for s in states])
            micro, before = states[0].micro, states[0].seconds
            steps, images, lrs = [s.optimizer_steps for s in states], [s.images for s in states], [s.lr for s in states]
        t0 = time.perf_counter()
        passes = [islice(m.fit.data.train, m.fit.micro_per_epoch - micro) for m in members]
        for batches in zip(*passes, strict=True):
            if stopping.requested():  # between optimizer steps: each member keeps a checkpoint of its epoch so far
                for i, m in enumerate(members):
                    if m.training and m.keeper is not None:
                        m.keeper.save(m.fit, EpochSoFar(
                            epoch=epoch, micro=micro, optimizer_steps=steps[i], images=images[i],
                            loss_sum=loss_sum[i].clone(), grad_norm_sum=grad_norm_sum[i].clone(), lr=lrs[i],
                            seconds=before + time.perf_counter() - t0,
                            generator=m.fit.data.train.position()))  # type: ignore[attr-defined]
                stopping.check()
            x = torch.stack([b[0] for b in batches])
            y = torch.stack([b[1] for b in batches])
            loss_sum += self._forward_backward(x, y)
            micro += 1
            grad_norm_sum += self.stacked.clip_([m.fit.tc.clip_grad or math.inf for m in members])
            for i, m in enumerate(members):
                images[i] += x.shape[1] if m.stepping and m.training else 0
                if not (m.stepping and m.training):
                    continue
                lrs[i] = _schedule(m.fit)
                m.fit.optimizer.step()
                for hook in m.fit.model.plan.after_step:
                    hook(m.fit.model)
                m.fit.step += 1
                steps[i] += 1
            self.stacked.zero_grad()
            self.step += 1
            if self.step % tc0.log_interval == 0:  # the periodic sync, as train_cell's
                for i, finite in enumerate(torch.isfinite(loss_sum).tolist()):
                    if not finite:
                        members[i].stepping = False  # masked from here; recorded as diverged at the epoch's end
        seconds = before + time.perf_counter() - t0
        train_loss = (loss_sum / max(1, micro)).tolist()  # the epoch's sync
        self._end_epoch(epoch, train_loss, grad_norm_sum, steps, images, lrs, seconds)

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Every member's loss on its own batch (x: (K, B, ...)), backward into the stacked gradients."""
        try:
            with self.autocast():
                losses = self._loss(self.stacked.params, self.stacked.buffers, x, y)
            losses.sum().backward()
        except torch.cuda.OutOfMemoryError:  # too many members for the device, not a missing vmap rule
            raise
        except (RuntimeError, NotImplementedError) as e:
            if not self.first_step:
                raise
            raise FusionRefused(f"a layer of this model has no vmap rule ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:160]})") from e
        self.first_step = False
        return losses.detach().float()

    # ---------------------------------------------------------------------------------------- the epoch's end

    def _end_epoch(self, epoch: int, train_loss: list[float], grad_norm_sum: torch.Tensor, steps: list[int],
                   images: list[int], lrs: list[float], seconds: float) -> None:
        members = self.members
        val = self.evaluate("val")
        grad_norms = grad_norm_sum.tolist()
        for i, m in enumerate(members):
            if not m.training:
                continue
            fit, progress = m.fit, m.fit.progress
            progress.train_seconds += seconds
            progress.images_seen += images[i]
            speed = images[i] / seconds if seconds else 0.0
            if not m.stepping or not math.isfinite(train_loss[i]) or train_loss[i] > fit.max_loss:
                m.state = DIVERGED
                progress.history.append(EpochRecord(epoch=epoch, train_loss=train_loss[i], val_top1=float("nan"),
                                                    lr=lrs[i], grad_norm=float("nan"), images_per_sec=speed,
                                                    step=fit.step, images=progress.images_seen))
                continue
            record = EpochRecord(epoch=epoch, train_loss=train_loss[i], val_top1=val[i], lr=lrs[i],
                                 grad_norm=grad_norms[i] / max(1, steps[i]), images_per_sec=speed, step=fit.step,
                                 images=progress.images_seen)
            progress.history.append(record)
            progress.next_epoch = epoch + 1
        if stopping.requested():  # SIGTERM: keep this epoch of every member before giving the cells back
            for m in members:
                if m.training and m.keeper is not None:
                    m.keeper.save(m.fit)
        stopping.check()
        for m in members:
            if not m.training or m.fit.progress.next_epoch != epoch + 1:
                continue
            try:
                if m.on_epoch is not None and m.on_epoch(m.fit.progress.history[-1]):
                    m.state = PRUNED
            except ClaimLostError as lost:  # another worker took this cell over: it stops alone
                m.state, m.lost = LOST, lost
        # one decision for the group: members that checkpoint at different epochs could never resume fused
        keeping = [m for m in members
                   if m.training and m.keeper is not None and m.fit.progress.next_epoch < m.fit.tc.epochs]
        if any(m.keeper.due() for m in keeping):  # type: ignore[union-attr]
            for m in keeping:
                m.keeper.save(m.fit)  # type: ignore[union-attr]

    @torch.inference_mode()
    def evaluate(self, split: str = "val") -> list[float]:
        """Every member's top-1 in percent on `split` (the members share its batches); one host sync."""
        self.base.eval()
        correct = torch.zeros(len(self.members), dtype=torch.long, device=self.dev)
        total = 0
        for x, y in getattr(self.members[0].fit.data, split):
            with self.autocast():
                logits = self._logits(self.stacked.params, self.stacked.buffers, x)
            correct += (logits.argmax(dim=-1) == y).sum(dim=-1)
            total += y.shape[0]
        self.base.train()
        return [100.0 * c / max(1, total) for c in correct.tolist()]


def _schedule(fit: Fit) -> float:
    """Set the member's lr for its next optimizer step (train_epoch's rule); returns the scheduled lr."""
    tc = fit.tc
    lr = tc.lr
    for group in fit.optimizer.param_groups:
        lr = warmup_cosine(fit.step, total_steps=fit.steps_per_epoch * tc.epochs,
                           warmup_steps=round(tc.warmup_epochs * fit.steps_per_epoch) * group.get("warmup", True),
                           lr=tc.lr, warmup_lr=tc.warmup_lr, min_lr=tc.min_lr)
        group["lr"] = lr * group.get("lr_scale", 1.0)
    return lr


def _outcome(m: Member, group: _Group, test: float) -> MemberOutcome:
    """A member's CellResult, as train_cell returns it (the test split read once, for members that ended ok)."""
    if m.state == LOST:
        return MemberOutcome(None, m.lost)
    status: Status = "ok" if m.state == TRAINING else "diverged" if m.state == DIVERGED else "pruned"
    return MemberOutcome(cell_result(m.fit, m.cell, status, test if status == "ok" else float("nan"), m.threads,
                                     m.keeper, fused_group=len(group.members)))
