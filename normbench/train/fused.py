"""Many cells, one model: a group of cells of one row (they differ in lr, seed, epochs and warmup only, or as a tune
search's trials do: train/fusion_rules.py) trains as one vmapped model.

Each member is built exactly as `train_cell` builds a cell (train/loop.py `build_fit`: its own seed's init and data
order, its own optimizer and schedule). Its parameters then move into one flat (K, P) buffer and stay aliased to their
slice (train/stacked.py), so the member's hooks, checkpoints and kept weights act on its own tensors. One step runs
every member's forward and backward at once (`functional_call` under `vmap`), then one update over the flat rows
(train/fused_step.py): per-member clipping, one vectorised AdamW over every member at its own lr and schedule
(train/stacked_adamw.py; another optimizer, Muon included, steps member by member as before), a block family's
after-step hook once over the stack. No arithmetic crosses members: a member whose loss goes non-finite stops
updating at once (a device-side mask, read by the host only at its periodic sync) and the others' numbers are those
of a group without it. Per-block telemetry is recorded per member through vmap's outputs (train/fused_telemetry.py).
With `compile`, the step's functions are compiled once per row shape and group size and kept across groups; with
`graphs` (CUDA), the whole step is replayed as one CUDA graph.

Members may differ in epochs (the convergence check's 2x cells join their row's report cells): a member ends at its
last epoch, recorded then, and the group trains on without it (restacked: the members left, K smaller). Each member's
result records its share of the group's seconds (the wall time split evenly among the members training), so a cell's
cost reads the same fused or not; its per-epoch images/s stay the rate it trained at.

On a GPU a small cell's step is bound by kernel launches, so K members cost about one step (HFTA, Wang et al., MLSys
2021); on a CPU, which is compute-bound, fusing barely pays (docs/speed.md): `--fuse auto` fuses on CUDA only.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
from torch.func import vmap

from normbench import stopping
from normbench.contracts.recipe import MUON_OPTIMIZERS, CellConfig
from normbench.contracts.results import CellResult, EpochRecord, Status
from normbench.errors import ClaimLostError
from normbench.train.cell_state import EpochSoFar
from normbench.train.checkpoint import Keeper
from normbench.train.checkpoint import restore as restore_checkpoint
from normbench.train.device import resolve_device
from normbench.train.fused_step import (
    FusedStep,
    GraphedStep,
    StepKit,
    autocast_for,
    compiled_kit,
    make_kit,
    template_builder,
)
from normbench.train.fused_telemetry import FusedTelemetry, observed_loss
from normbench.train.fusion_rules import FusionRefused, refusal
from normbench.train.loop import EpochCallback, Fit, build_fit, cell_result
from normbench.train.schedule import warmup_cosine
from normbench.train.stacked import Stacked
from normbench.train.stacked_adamw import StackedAdamW, scheduled_lr
from normbench.train.stacked_adamw import refusal as adamw_refusal
from normbench.train.stacked_muon import StackedMuon

TRAINING, FINISHED, DIVERGED, PRUNED, LOST = "training", "finished", "diverged", "pruned", "lost"


@dataclass
class Member:
    """One cell of a group: its fit (train/loop.py), callbacks and where it stands."""

    cell: CellConfig
    fit: Fit
    on_epoch: EpochCallback | None = None
    keeper: Keeper | None = None
    state: str = TRAINING
    lost: ClaimLostError | None = None  # why a LOST member stopped: its claim was taken over
    stepping: bool = True               # False once the host saw its loss non-finite: recorded at the epoch's end
    threads: list[int] = field(default_factory=list)
    share: float = 0.0                  # its share of the group's wall seconds so far (this attempt)

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
                on_end: Sequence[Callable[[MemberOutcome], None] | None] | None = None,
                compile: bool | None = None, graphs: bool = False) -> list[MemberOutcome]:
    """Train `cells` as one fused model; returns each member's outcome in order. Each member's `on_epoch` is its
    cell's (True prunes that member alone; ClaimLostError stops it alone); `keepers` and `resumes` are per member
    as `train_cell`'s. A member that stops before the group (finished, pruned, diverged, lost) gets its outcome at
    once, through its `on_end`, timed to its own end: the caller records it then, so a later crash of the group
    cannot lose it. `compile`: compile the step (None: as the cells' `train.compile` says); `graphs`: replay it as a
    CUDA graph (CUDA only). Raises FusionRefused (train/fusion_rules.py) before training anything when the cells
    cannot be fused: the caller trains them one by one."""
    k = len(cells)
    on_epoch, keepers, resumes = on_epoch or [None] * k, keepers or [None] * k, resumes or [None] * k
    on_end = on_end or [None] * k
    dev = resolve_device(device)
    if (reason := refusal(cells, dev, resumes)) is not None:
        raise FusionRefused(reason)
    compile = cells[0].train.uses_compile(dev.type == "cuda") if compile is None else compile
    t_start = time.perf_counter()
    # built uncompiled: the group compiles its own step, and build_fit's dynamo reset would drop the cached one
    members = [Member(cell, build_fit(_uncompiled(cell), dev, None, None), on_epoch[i], keepers[i])
               for i, cell in enumerate(cells)]
    so_far: list[EpochSoFar | None] = [None] * k
    for i, (member, resume) in enumerate(zip(members, resumes, strict=True)):
        if resume is not None:  # refusal() checked that every member's checkpoint stands at one point
            so_far[i] = restore_checkpoint(member.fit, resume)
        member.fit.keeper = member.keeper
    group = _Group(members, dev, compile=compile, graphs=graphs and dev.type == "cuda")
    clock = _Clock(t_start)
    clock.charge(members)  # the members' builds
    outcomes: list[MemberOutcome | None] = [None] * k

    def end(m: Member, test: float, last: bool) -> None:
        """`m`'s outcome now; handed over through its `on_end` unless it ends ok with the whole group (`last`)."""
        i = members.index(m)
        outcomes[i] = _outcome(m, k, test)
        if on_end[i] is not None and not last:
            on_end[i](outcomes[i])

    for epoch in range(members[0].fit.progress.next_epoch, max(m.fit.tc.epochs for m in members)):
        if not group.members:
            break
        for m in group.members:
            if not m.threads or m.threads[-1] != torch.get_num_threads():
                m.threads.append(torch.get_num_threads())
        group.epoch(epoch, so_far if so_far[0] is not None else None, clock)
        so_far = [None] * k
        clock.charge(group.members)
        done = [m for m in group.members if m.training and m.fit.progress.next_epoch >= m.fit.tc.epochs]
        last = all(m in done or not m.training for m in group.members)  # nothing trains on after this epoch
        if done:  # at their last epoch: the test split, read once for them, and only to report
            test = group.evaluate("test")
            clock.charge(done)
            for m in done:
                m.state = FINISHED
                end(m, test[group.members.index(m)], last)
        for m in group.members:  # those that stopped this epoch end now, at their own time
            if m.state in (DIVERGED, PRUNED, LOST):
                end(m, float("nan"), last=False)
        group.restack([m for m in group.members if m.training])
    return [o if o is not None else _outcome(m, k, float("nan")) for o, m in zip(outcomes, members, strict=True)]


def _uncompiled(cell: CellConfig) -> CellConfig:
    return dataclasses.replace(cell, train=dataclasses.replace(cell.train, compile="off"))


class _Clock:
    """Each member's share of the group's wall time: the seconds since the last charge, split evenly among the
    members the group trained meanwhile. A member's result and checkpoints record its share (`charge_to`)."""

    def __init__(self, start: float) -> None:
        self.last = start

    def charge(self, members: Sequence[Member]) -> None:
        now = time.perf_counter()
        for m in members:
            m.share += (now - self.last) / len(members)
        self.last = now


def charge_to(m: Member) -> None:
    """The member's attempt seconds read as its share (what `cell_result` and a checkpoint record: train/loop.py
    `Fit.attempt_seconds`)."""
    m.fit.started = time.perf_counter() - m.share


class _Group:
    """The stacked members, their step, evaluation and epoch; restacked when members leave."""

    def __init__(self, members: list[Member], dev: torch.device, *, compile: bool, graphs: bool) -> None:
        self.dev, self.compile, self.graphs = dev, compile, graphs
        self.step = members[0].fit.step  # the group's optimizer steps (every member resumed at the same one)
        self.first_step = True
        self.members: list[Member] = []
        self._stack(members)

    def _stack(self, members: list[Member]) -> None:
        """Stack `members`' tensors and build the step for them (again after members left)."""
        self.members = members
        fit, cell, k = members[0].fit, members[0].cell, len(members)
        fits = [m.fit for m in members]
        self.stacked = Stacked([f.model for f in fits])
        # Muon's hidden matrices: one batched Newton-Schulz for every member (train/stacked_muon.py)
        self.muon = StackedMuon(fits, self.stacked) if fit.tc.optimizer.lower() in MUON_OPTIMIZERS else None
        self.adamw = StackedAdamW(fits, self.stacked) if self.muon is None and adamw_refusal(fits) is None else None
        hooks = fit.model.plan.after_step
        if self.compile and self.adamw is not None:  # one compiled step per row shape and K, across groups
            self.kit: StepKit = compiled_kit(cell, k, self.dev, template_builder(cell, fit.data, self.dev),
                                             fit.loss_fn, hooks)
        else:
            self.kit = make_kit(fit.model, fit.loss_fn, hooks, compiled=False)
        self.autocast = autocast_for(self.dev, fit.tc.uses_bf16(self.dev.type == "cuda"), self.graphs)
        clips = [f.tc.clip_grad for f in fits]
        self.fused = FusedStep(self.kit, self.stacked, self.adamw, clips, self.autocast) if self.adamw else None
        self.graphed = GraphedStep(self.fused) if self.graphs and self.fused is not None else None
        self.limits = torch.tensor([c or math.inf for c in clips], dtype=self.stacked.flat.dtype, device=self.dev)
        self.telemetry = FusedTelemetry(self.stacked, len(fit.model.blocks))
        self.observed = vmap(observed_loss(self.kit.base, self.kit.member_loss))

    def restack(self, members: list[Member]) -> None:
        """Go on with `members` alone (those that ended leave the stack): their optimizer state through their own
        optimizers, as a checkpoint carries it."""
        if len(members) == len(self.members) or not members:
            if not members:
                self.members = []
            return
        if self.adamw is not None:
            for m in members:
                self.adamw.export(self.members.index(m))
        self._stack(members)

    # ------------------------------------------------------------------------------------------------- one epoch

    def epoch(self, epoch: int, so_far: list[EpochSoFar | None] | None, clock: _Clock) -> None:
        """Train every member one epoch, then record it for each (train_cell's epoch end, per member)."""
        members, k = self.members, len(self.members)
        tc0 = members[0].fit.tc
        self.kit.base.train()
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
            loss_sum = torch.stack([s.loss_sum.reshape(()) for s in states]).to(self.dev)
            grad_norm_sum = torch.stack([s.grad_norm_sum.reshape(()) for s in states]).to(self.dev)
            micro, before = states[0].micro, states[0].seconds
            steps, images, lrs = [s.optimizer_steps for s in states], [s.images for s in states], [s.lr for s in states]
        if self.fused is not None:
            self.fused.start_epoch(loss_sum, grad_norm_sum)
            self.fused.acc["finite"].copy_(torch.tensor([m.stepping for m in members], device=self.dev))
            loss_sum, grad_norm_sum = self.fused.acc["loss_sum"], self.fused.acc["grad_norm_sum"]
        t0 = time.perf_counter()
        passes = [islice(m.fit.data.train, m.fit.micro_per_epoch - micro) for m in members]
        for batches in zip(*passes, strict=True):
            if stopping.requested():  # between optimizer steps: each member keeps a checkpoint of its epoch so far
                clock.charge(members)
                for i, m in enumerate(members):
                    if m.training and m.keeper is not None:
                        self.save(m, EpochSoFar(
                            epoch=epoch, micro=micro, optimizer_steps=steps[i], images=images[i],
                            loss_sum=loss_sum[i].clone(), grad_norm_sum=grad_norm_sum[i].clone(),
                            lr=self._lr(m, lrs[i]), seconds=before + time.perf_counter() - t0,
                            generator=m.fit.data.train.position()))  # type: ignore[attr-defined]
                stopping.check()
            x = torch.stack([b[0] for b in batches])
            y = torch.stack([b[1] for b in batches])
            observed = tc0.telemetry_every > 0 and self.step % tc0.telemetry_every == 0  # hooks run eagerly
            stepping = [i for i, m in enumerate(members) if m.stepping]
            if self.fused is not None:
                self._step_stacked(x, y, observed)
            else:
                losses, norms = self._step_each(x, y, stepping, lrs, observed)
                loss_sum += losses
                grad_norm_sum += norms
            micro += 1
            for i in stepping:
                images[i] += x.shape[1]
                members[i].fit.step += 1
                steps[i] += 1
            self.step += 1
            if self.step % tc0.log_interval == 0:  # the periodic sync, as train_cell's
                finite = (self.fused.acc["finite"] if self.fused is not None else torch.isfinite(loss_sum)).tolist()
                for i, ok in enumerate(finite):
                    if not ok:
                        members[i].stepping = False  # masked from here; recorded as diverged at the epoch's end
        seconds = before + time.perf_counter() - t0
        train_loss = (loss_sum / max(1, micro)).tolist()  # the epoch's sync
        if self.fused is not None:  # a member's record names the lr its last step took, as alone
            lrs = [self._lr(m, lr) for m, lr in zip(members, lrs, strict=True)]
        self.telemetry.flush(members)
        self._end_epoch(epoch, train_loss, grad_norm_sum, steps, images, lrs, seconds, clock)

    def _lr(self, m: Member, fallback: float) -> float:
        """The schedule's lr at the member's last step (the last param group's, as train_epoch records it)."""
        if self.fused is None or m.fit.step == 0:
            return fallback
        return scheduled_lr(m.fit, m.fit.step - 1, m.fit.optimizer.param_groups[-1])

    def _step_stacked(self, x: torch.Tensor, y: torch.Tensor, observed: bool) -> None:
        """One step of the stacked AdamW path: captured or compiled or eager; telemetry's steps eager."""
        assert self.fused is not None
        if observed:
            losses, forward = self._forward_backward(x, y, observed=True)
            self.telemetry.before_update()
            self.fused.update(losses)
            self.telemetry.after_update(self.step, forward)
            self.first_step = False
            return
        if not self.first_step:
            (self.graphed or self.fused)(x, y)
            return
        try:
            self._guarded(lambda: self.fused(x, y))  # type: ignore[misc]
        except FusionRefused:
            if not self.kit.compiled:
                raise
            self.stacked.zero_grad()  # the compiled step failed before it changed anything: train it eagerly
            self.compile = False
            self._restack_eager()
            self._guarded(lambda: self.fused(x, y))  # type: ignore[misc]
        self.first_step = False

    def _restack_eager(self) -> None:
        """The same members again, their step uncompiled (its compile failed before it changed anything)."""
        if self.adamw is not None:
            for i in range(len(self.members)):
                self.adamw.export(i)
        self._stack(self.members)

    def _step_each(self, x: torch.Tensor, y: torch.Tensor, stepping: list[int], lrs: list[float],
                   observed: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One step through each member's own optimizer (an optimizer the stacked AdamW does not cover: Muon's
        AdamW part, timm's others); returns the (K,) losses and pre-clipping norms."""
        members = self.members
        losses, forward = self._forward_backward(x, y, observed)
        self.first_step = False
        if observed:
            self.telemetry.before_update()
        norms = self.stacked.clip_(self.limits)
        for i in stepping:
            lrs[i] = _schedule(members[i].fit)
        if self.muon is not None:
            self.muon.step(stepping)
        for i in stepping:
            m = members[i]
            with self.muon.held_back(i) if self.muon is not None else nullcontext():  # its AdamW part
                m.fit.optimizer.step()
            for hook in m.fit.model.plan.after_step:
                hook(m.fit.model)
        if observed:
            self.telemetry.after_update(self.step, forward)
        self.stacked.zero_grad()
        return losses, norms

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor, observed: bool) -> tuple[torch.Tensor, Any]:
        """Every member's loss on its own batch (x: (K, B, ...)), backward into the stacked gradients; with
        `observed`, through telemetry's recorder (its per-block forward quantities returned too)."""
        def run() -> tuple[torch.Tensor, Any]:
            with self.autocast():
                if observed:
                    losses, forward = self.observed(self.stacked.params, self.stacked.buffers, x, y)
                else:
                    losses, forward = self.kit.loss(self.stacked.params, self.stacked.buffers, x, y), None
            losses.sum().backward()
            return losses.detach().float(), forward

        if not self.first_step:
            return run()
        out = self._guarded(run)
        return out

    def _guarded(self, run: Callable[[], Any]) -> Any:
        """The group's first step: an error there is a layer without a vmap rule (or a step that cannot compile),
        refused so that the caller trains the cells one by one; a later one is a real failure."""
        try:
            return run()
        except torch.cuda.OutOfMemoryError:  # too many members for the device, not a missing vmap rule
            raise
        except (RuntimeError, NotImplementedError, AssertionError) as e:
            if not self.first_step:
                raise
            raise FusionRefused(f"a layer of this model has no vmap rule ({type(e).__name__}: "
                                f"{str(e).splitlines()[0][:160] if str(e) else ''})") from e
        except Exception as e:  # dynamo and inductor raise their own errors
            if not (self.first_step and self.kit.compiled):
                raise
            raise FusionRefused(f"the step did not compile ({type(e).__name__})") from e

    # ---------------------------------------------------------------------------------------- the epoch's end

    def save(self, m: Member, so_far: EpochSoFar | None = None) -> None:
        """Member `m`'s checkpoint, as its cell alone writes it: its optimizer's state in torch's layout, its
        telemetry so far, its share of the seconds."""
        assert m.keeper is not None
        i = self.members.index(m)
        if self.adamw is not None:
            self.adamw.export(i)
        self.telemetry.flush(self.members)
        charge_to(m)
        try:
            m.keeper.save(m.fit, so_far)
        finally:
            if self.adamw is not None:
                self.adamw.release(i)

    def _end_epoch(self, epoch: int, train_loss: list[float], grad_norm_sum: torch.Tensor, steps: list[int],
                   images: list[int], lrs: list[float], seconds: float, clock: _Clock) -> None:
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
            clock.charge(members)
            for m in members:
                if m.training and m.keeper is not None:
                    self.save(m)
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
            clock.charge(members)
            for m in keeping:
                self.save(m)

    @torch.inference_mode()
    def evaluate(self, split: str = "val") -> list[float]:
        """Every member's top-1 in percent on `split` (the members share its batches); one host sync."""
        base = self.kit.base
        base.eval()
        correct = torch.zeros(len(self.members), dtype=torch.long, device=self.dev)
        total = 0
        for x, y in getattr(self.members[0].fit.data, split):
            with self.autocast():
                logits = self.kit.logits(self.stacked.params, self.stacked.buffers, x)
            correct += (logits.argmax(dim=-1) == y).sum(dim=-1)
            total += y.shape[0]
        base.train()
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


def _outcome(m: Member, k: int, test: float) -> MemberOutcome:
    """A member's CellResult, as train_cell returns it (the test split read once, for members that ended ok),
    its seconds its share of the group's; `k` the group it trained in."""
    if m.state == LOST:
        return MemberOutcome(None, m.lost)
    status: Status = ("ok" if m.state in (TRAINING, FINISHED) else "diverged" if m.state == DIVERGED
                      else "pruned")
    charge_to(m)
    return MemberOutcome(cell_result(m.fit, m.cell, status, test if status == "ok" else float("nan"), m.threads,
                                     m.keeper, fused_group=k))
