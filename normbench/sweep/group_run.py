"""A worker's fused turn (`--fuse K`): claim up to K queued cells of one row that differ only in lr and seed, train
them as one model (train/fused.py), and end each one's attempt as `run_cell` ends a cell's: its own trial (claimed,
heart-beaten, reported per epoch, finished, failed or given back alone), its own MLflow run and checkpoint.

A group the fusion rules refuse (train/fusion_rules.py) is handed back to the worker, which trains its claims one by
one; a group that fails on its first fused step (a layer with no vmap rule) gives its claims back to the queue and
its row is not fused again by this worker.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from normbench.contracts.recipe import CellConfig
from normbench.contracts.results import EpochRecord
from normbench.errors import ClaimLostError, NormbenchError
from normbench.store.claim import Claim
from normbench.store.ledger import Ledger
from normbench.sweep.cell_end import DISK_FULL, FAILED, TRAINED, ledger_state, lost_claim, release, replay, settle
from normbench.sweep.checkpoints import CellCheckpoints, CheckpointFolder
from normbench.sweep.progress import Progress
from normbench.tracking.tracker import Tracker
from normbench.train.cpu_share import CpuShare
from normbench.train.device import resolve_device
from normbench.train.fused import train_group
from normbench.train.fusion_rules import FusionRefused, refusal, same_point

FUSED_AXES = frozenset({"lr", "seed"})  # the axes a group's cells may differ in (train/fusion_rules.py FUSABLE_KEYS)


def auto_group_size(device: str) -> int:
    """`--fuse auto`: 16 on CUDA, where a small cell's step is launch-bound; 1 (unfused) on a CPU, where fusing
    measured 1.07-1.16x at best (docs/speed.md)."""
    return 16 if resolve_device(device).type == "cuda" else 1


def row_key(axes: Mapping[str, Any]) -> str:
    """What a cell shares with the cells it may be fused with: its axes but lr and seed."""
    return json.dumps({k: v for k, v in axes.items() if k not in FUSED_AXES}, sort_keys=True, default=str)


def claim_group(ledger: Ledger, job: Any, first: Claim, size: int) -> list[Claim]:
    """`first` and up to `size - 1` more queued cells of its row (the suite's own, as `job.listed` says)."""
    key = row_key(first.trial.user_attrs.get("axes", {}))
    claims = [first]
    while len(claims) < size:
        more = ledger.claim(job.study, lambda t: job.listed(t) and row_key(t.user_attrs.get("axes", {})) == key)
        if more is None:
            break
        claims.append(more)
    return claims


@dataclass
class _Member:
    claim: Claim
    cell_id: str
    params: dict[str, Any]
    config: CellConfig
    kept: CellCheckpoints | None
    resume: dict[str, Any] | None
    run_id: str = ""
    outcome: str = ""  # set once the member's attempt has ended here


@dataclass
class GroupTurn:
    """What a fused turn did: each fused claim's outcome (TRAINED, FAILED, LOST), or `refused` (the reason) with
    nothing started: the worker then trains the claims one by one, as it trains `alone` (claims whose checkpoints
    stand elsewhere than the group's) in any case."""

    outcomes: list[str]
    alone: list[Claim] = field(default_factory=list)
    trained_seconds: float = 0.0
    refused: str = ""
    unfusable: bool = False  # the row failed on its first fused step: its claims are back in the queue


def run_group(job: Any, claims: list[Claim], *, tracker: Tracker, device: str, progress: Progress, suite_name: str,
              checkpoints: CheckpointFolder | None = None, share: CpuShare | None = None) -> GroupTurn:
    """Train `claims` (one row's cells) as one fused model; see the module docstring."""
    members = []
    for claim in claims:
        cell_id, params, config = job.cell_for(claim)
        kept = CellCheckpoints(checkpoints, job.study.study_name, cell_id, config) if checkpoints is not None else None
        members.append(_Member(claim, cell_id, params, config, kept,
                               kept.resume(claim.trial, 1) if kept is not None else None))
    fused = same_point([m.resume for m in members])
    alone = [m.claim for i, m in enumerate(members) if i not in fused]
    members = [members[i] for i in fused]
    reason = refusal([m.config for m in members], resolve_device(device), [m.resume for m in members])
    if reason is None and len(members) < 2:
        reason = "their checkpoints stand at different points"
    if reason is not None:
        return GroupTurn([], refused=reason)
    for m in members:
        frozen = m.claim.frozen()
        m.run_id = tracker.start(m.cell_id, m.params, tags={
            "suite": suite_name, "study": job.study.study_name, "trial": str(m.claim.trial.number),
            "attempt": str(1 + len(frozen.system_attrs.get("retry_history", []))), "fused_group": str(len(members))})
        if not m.claim.held(ask=True):
            m.outcome = lost_claim(m.cell_id, m.run_id, tracker, progress)
        elif m.resume is not None:
            replay(m.resume["progress"]["history"], m.claim, m.run_id, tracker, progress)
    live = [m for m in members if not m.outcome]
    if not live:
        return GroupTurn([m.outcome for m in members], alone)
    progress.start_cell(f"{live[0].cell_id} (+{len(live) - 1} fused)", live[0].config.train.epochs)
    between_epochs = 0.0

    def on_epoch_of(m: _Member, shows_progress: bool):  # noqa: ANN202 - an EpochCallback
        def on_epoch(record: EpochRecord) -> bool:
            nonlocal between_epochs
            started = time.perf_counter()
            if not m.claim.held():
                raise ClaimLostError(f"trial {m.claim.trial.number} was taken over")
            if share is not None and shows_progress:
                share.apply()
            tracker.log_epoch(m.run_id, record)
            if shows_progress:
                progress.epoch(record)
            m.claim.report(record["val_top1"], record["step"])
            prune = job.report and m.claim.should_prune()
            between_epochs += time.perf_counter() - started
            return prune
        return on_epoch

    train_started = time.perf_counter()
    try:
        with contextlib.ExitStack() as beats:
            for m in live:
                beats.enter_context(m.claim.heartbeat())
            ends = train_group([m.config for m in live], device,
                               on_epoch=[on_epoch_of(m, i == 0) for i, m in enumerate(live)],
                               keepers=[m.kept.keeper(m.claim) if m.kept is not None else None for m in live],
                               resumes=[m.resume for m in live])
    except FusionRefused as e:  # its first fused step failed: the claims go back, trained one by one next turn
        for m in live:
            release(m.claim, m.run_id, tracker)
        progress.note(f"row of {live[0].cell_id}: not fused ({e}); its cells train one by one")
        return GroupTurn([], alone, refused=str(e), unfusable=True)
    except (KeyboardInterrupt, NormbenchError):
        for m in live:
            release(m.claim, m.run_id, tracker)
        raise
    except Exception as e:  # a crash fails every member's claim: another turn takes each again
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            for m in live:
                release(m.claim, m.run_id, tracker)
            raise
        for m in live:
            with contextlib.suppress(ClaimLostError):
                m.claim.fail(f"{type(e).__name__}: {e}")
            tracker.fail(m.run_id)
            m.outcome = FAILED
        progress.note(f"fused group of {live[0].cell_id} failed: {type(e).__name__}: {e} (retried on the next run)")
        return GroupTurn([m.outcome for m in members], alone, time.perf_counter() - train_started - between_epochs)
    trained = time.perf_counter() - train_started - between_epochs
    progress.cell = ""
    for i, (m, end) in enumerate(zip(live, ends, strict=True)):
        try:
            m.outcome = _finish(m, end.result, tracker, progress)
        except KeyboardInterrupt:  # no trial or run may stay RUNNING: this one settled, the rest given back
            settle(m.claim, m.run_id, tracker)
            for rest in live[i + 1:]:
                release(rest.claim, rest.run_id, tracker)
            raise
    return GroupTurn([m.outcome for m in members], alone, trained)


def _finish(m: _Member, result: Any, tracker: Tracker, progress: Progress) -> str:
    """Record one member's result as `run_cell` records a cell's; LOST when its claim went elsewhere."""
    if result is None:
        return lost_claim(m.cell_id, m.run_id, tracker, progress)
    try:
        if not m.claim.held(ask=True):
            raise ClaimLostError(f"trial {m.claim.trial.number} was taken over")
        tracker.summarize(m.run_id, result)
        if m.kept is not None and (weights := m.kept.before_finish(m.claim)) is not None:
            tracker.log_artifact(m.run_id, weights)
        m.claim.finish(result)
        if m.kept is not None:
            m.kept.clean()
        tracker.close(m.run_id, ledger_state(result))
    except ClaimLostError:
        return lost_claim(m.cell_id, m.run_id, tracker, progress)
    progress.record(m.cell_id, result)
    return TRAINED
