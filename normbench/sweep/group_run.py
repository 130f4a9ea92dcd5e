"""A worker's fused turn (`--fuse K`): claim up to K queued cells of one row that differ only in lr, seed, epochs and
warmup (the row's selection cells, a bracketing round's, or its report seeds with the convergence check's 2x cells:
from every study the worker has jobs in), or a tune search's trials (within its Job.max_in_flight), train them as
one model (train/fused.py), and end each one's attempt as `run_cell` ends a cell's: its own trial (claimed,
heart-beaten, reported per epoch, finished, failed or given back alone), its own MLflow run, telemetry and checkpoint.

A worker claims only cells whose checkpoints stand at one point, and never holds a claim it is not training: a group
the fusion rules refuse (train/fusion_rules.py) trains its first cell alone and gives the others back to the queue at
once, as does a group whose first fused step fails (a layer with no vmap rule); neither row is fused again by this
worker. A member that stops before the group (pruned, diverged, lost) is recorded then.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from normbench import stopping
from normbench.contracts.recipe import CellConfig
from normbench.contracts.results import EpochRecord
from normbench.errors import ClaimLostError, NormbenchError
from normbench.store.claim import Claim
from normbench.store.ledger import Ledger
from normbench.sweep.cell_end import (
    DISK_FULL,
    FAILED,
    TRAINED,
    give_back,
    ledger_state,
    lost_claim,
    release,
    replay,
    settle,
)
from normbench.sweep.checkpoints import CHECKPOINT_ATTR, CellCheckpoints, CheckpointFolder
from normbench.sweep.fuse_plan import FUSED_AXES, FusePlan, plan_for
from normbench.sweep.progress import Progress
from normbench.tracking.run_record import TrialRun
from normbench.tracking.tracker import Tracker
from normbench.train.cpu_share import CpuShare
from normbench.train.device import resolve_device
from normbench.train.fused import MemberOutcome, train_group
from normbench.train.fusion_rules import FusionRefused, refusal, same_point


def auto_group_size(device: str) -> int:
    """`--fuse auto`'s largest group on `device` (sweep/fuse_plan.py: a measurement's, else its constants; 1, unfused,
    on a CPU)."""
    return plan_for("auto", resolve_device(device).type).k


def row_key(axes: Mapping[str, Any]) -> str:
    """What a cell shares with the cells it may be fused with: its axes but lr, seed, epochs, warmup and a tune
    confirmation's search trial (FUSED_AXES; train/fusion_rules.py checks the recipes)."""
    return json.dumps({k: v for k, v in axes.items() if k not in FUSED_AXES}, sort_keys=True, default=str)


def checkpoint_point(trial: Any) -> tuple[Any, ...] | None:
    """Where a queued cell's recorded checkpoint stands, (step, epoch, batch); None: it starts afresh."""
    record = trial.user_attrs.get(CHECKPOINT_ATTR) or {}
    return tuple(record.get(k) for k in ("step", "epoch", "batch")) if record else None


def claim_group(ledger: Ledger, job: Any, first: Claim, size: int, jobs: list[Any] | None = None,
                claims: list[Claim] | None = None) -> list[Claim]:
    """`first` and up to `size - 1` more queued cells of its row, from `job`'s study and the other `jobs`' (a stage's
    studies: the report seeds and the convergence check's 2x cells), each the suite's own (as its job's `listed`
    says), whose recorded checkpoints stand where first's does (fresh with fresh): only those can train as one, and
    a claim held but not trained would wait without a heartbeat. `claims`: a group being filled (adds to it)."""
    key, point = row_key(first.trial.user_attrs.get("axes", {})), checkpoint_point(first.trial)
    claims = claims or [first]
    for other in [job, *(j for j in jobs or [] if j is not job)]:
        while len(claims) < size:
            more = ledger.claim(other.study, lambda t, o=other: o.listed(t) and checkpoint_point(t) == point
                                and row_key(t.user_attrs.get("axes", {})) == key)
            if more is None:
                break
            claims.append(more)
    return claims


def fill_group(ledger: Ledger, job: Any, first: Claim, fuse: FusePlan, jobs: list[Any], wait: bool) -> list[Claim]:
    """`first` and the cells of its row to fuse with it (`claim_group`, from every job's study); at a stage's start
    (`wait`), up to `fuse.wait_s` more for the group to fill while peers queue the stage. A group under `fuse.min_k`
    is not worth fusing (the fuse bench measured it slower than its cells alone): the others go back to the queue at
    once and `first` trains alone."""
    claims = [first]  # filled in place: a claim made before a failure is in it, to be given back
    deadline = time.monotonic() + (fuse.wait_s if wait else 0.0)
    try:
        claim_group(ledger, job, first, fuse.k, jobs, claims)
        while len(claims) < fuse.k and time.monotonic() < deadline:
            stopping.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            claim_group(ledger, job, first, fuse.k, jobs, claims)
    except BaseException:  # a stop (SIGTERM, Ctrl-C) or a ledger failure while filling: none stays RUNNING untrained
        for claim in claims:
            give_back(claim)
        raise
    if 1 < len(claims) < fuse.min_k:
        for claim in claims[1:]:
            give_back(claim)
        claims = [first]
    return claims


def job_of(claim: Claim, job: Any, jobs: list[Any] | None) -> Any:
    """The job whose study `claim` was drawn from (`job` unless `jobs` holds another)."""
    return next((j for j in jobs or [] if j.study.study_name == claim.study.study_name), job)


@dataclass
class _Member:
    job: Any  # the job of its study (sweep/plan.py Job): its cell_for, listed and pruning
    claim: Claim
    cell_id: str
    run: TrialRun  # its MLflow run as it starts (sweep/cells.py cell_run)
    config: CellConfig
    kept: CellCheckpoints | None
    resume: dict[str, Any] | None = None
    run_id: str = ""
    outcome: str = ""  # set once the member's attempt has ended here


@dataclass
class GroupTurn:
    """What a fused turn did: each fused member's outcome (TRAINED, FAILED, LOST), or `refused` (the reason) when
    the group did not fuse. Claims it did not train went back to the queue at once (`given_back`), but `alone`: the
    one the worker trains by itself now."""

    outcomes: list[str]
    alone: Claim | None = None
    trained_seconds: float = 0.0
    refused: str = ""
    unfusable: bool = False  # the row cannot fuse (the rules, or its first fused step failed): never group it again
    given_back: int = 0


def run_group(job: Any, claims: list[Claim], *, tracker: Tracker, device: str, progress: Progress, suite_name: str,
              checkpoints: CheckpointFolder | None = None, share: CpuShare | None = None,
              jobs: list[Any] | None = None, compile: bool | None = None, graphs: bool = False) -> GroupTurn:
    """Train `claims` (one row's cells, from `job`'s study or the other `jobs`') as one fused model; see the module
    docstring. `compile`, `graphs`: the fused step's (train/fused.py `train_group`)."""
    members = []
    for claim in claims:
        owner = job_of(claim, job, jobs)
        cell_id, run, config = owner.cell_for(claim)
        kept = (CellCheckpoints(checkpoints, owner.study.study_name, cell_id, config) if checkpoints is not None
                else None)
        members.append(_Member(owner, claim, cell_id, run, config, kept))
    dev = resolve_device(device)
    if (reason := refusal([m.config for m in members], dev, [None] * len(members))) is not None:  # the row's recipe
        _give_back(members[1:], tracker)
        return GroupTurn([], members[0].claim, refused=reason, unfusable=True, given_back=len(members) - 1)
    for m in members:  # the checkpoints the claims' records named stand at one point, unless a record lags its file
        m.resume = m.kept.resume(m.claim.trial, 1) if m.kept is not None else None
    fused = same_point([m.resume for m in members])
    apart = [m for i, m in enumerate(members) if i not in fused]
    members = [members[i] for i in fused]
    if len(members) < 2:
        apart = [m for m in apart if m is not members[0]] if members else apart
        _give_back(apart, tracker)
        return GroupTurn([], members[0].claim if members else None, refused="their checkpoints stand at different "
                         "points", given_back=len(apart))
    _give_back(apart, tracker)
    return _train(members, tracker=tracker, device=device, progress=progress, share=share, given_back=len(apart),
                  compile=compile, graphs=graphs)


def _train(members: list[_Member], *, tracker: Tracker, device: str, progress: Progress, share: CpuShare | None,
           given_back: int, compile: bool | None = None, graphs: bool = False) -> GroupTurn:
    """Start each member's run, train them fused, record each as it ends; every claim not recorded is settled on
    the way out (Ctrl-C, SIGTERM, a full disk) or failed (a crash), never left RUNNING."""
    shown: list[_Member] = []  # the member the progress line and the CPU share follow: the first still training
    between_epochs, train_started = 0.0, time.perf_counter()

    def on_epoch_of(m: _Member):  # noqa: ANN202 - an EpochCallback
        def on_epoch(record: EpochRecord) -> bool:
            nonlocal between_epochs
            started = time.perf_counter()
            if not m.claim.held():
                raise ClaimLostError(f"trial {m.claim.trial.number} was taken over")
            if share is not None and shown[0] is m:
                share.apply()
            tracker.log_epoch(m.run_id, record)
            if shown[0] is m:
                progress.epoch(record)
            m.claim.report(record["val_top1"], record["step"])
            prune = m.job.may_prune(record["epoch"], m.config.train.epochs) and m.claim.should_prune()
            between_epochs += time.perf_counter() - started
            return prune
        return on_epoch

    def on_end_of(m: _Member):  # noqa: ANN202 - recorded as soon as it stops, not when the group does
        def on_end(end: MemberOutcome) -> None:
            m.outcome = _finish(m, end.result, tracker, progress)
            if shown[0] is m and (rest := [o for o in live if not o.outcome]):
                shown[0] = rest[0]
        return on_end

    live: list[_Member] = []
    try:
        for m in members:  # the result tags each run with its fused group (run_record.result_tags), as sync does
            m.run_id = tracker.start(m.run)
            if not m.claim.held(ask=True):
                m.outcome = lost_claim(m.cell_id, m.run_id, tracker, progress)
        live = [m for m in members if not m.outcome]
        if not live:
            return GroupTurn([m.outcome for m in members], given_back=given_back)
        shown.append(live[0])
        progress.start_cell(live[0].cell_id, live[0].config.train.epochs, fused=[m.cell_id for m in live[1:]])
        for m in live:  # after start_cell: the epochs a checkpoint holds show under this group's line
            if m.resume is not None:
                replay(m.resume["progress"]["history"], m.claim, m.run_id, tracker, progress)
        train_started = time.perf_counter()
        with contextlib.ExitStack() as beats:  # every member beats until it is recorded
            for m in live:
                beats.enter_context(m.claim.heartbeat())
            ends = train_group([m.config for m in live], device, on_epoch=[on_epoch_of(m) for m in live],
                               keepers=[m.kept.keeper(m.claim) if m.kept is not None else None for m in live],
                               resumes=[m.resume for m in live], on_end=[on_end_of(m) for m in live],
                               compile=compile, graphs=graphs)
            trained = time.perf_counter() - train_started - between_epochs
            for m, end in zip(live, ends, strict=True):
                if not m.outcome:
                    m.outcome = _finish(m, end.result, tracker, progress)
    except FusionRefused as e:  # its first fused step failed: the claims go back, trained one by one next turn
        _give_back(live, tracker)
        progress.note(f"row of {members[0].cell_id}: not fused ({e}); its cells train one by one")
        return GroupTurn([], refused=str(e), unfusable=True, given_back=given_back + len(members))
    except (KeyboardInterrupt, NormbenchError):  # what is recorded stays; the rest back to the queue
        _settle([m for m in members if not m.outcome], tracker)
        raise
    except Exception as e:  # a crash fails every member not recorded yet: another turn takes each again
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            _settle([m for m in members if not m.outcome], tracker)
            raise
        for m in members:
            if not m.outcome:
                with contextlib.suppress(ClaimLostError):
                    m.claim.fail(f"{type(e).__name__}: {e}")
                if m.run_id:
                    tracker.fail(m.run_id)
                m.outcome = FAILED
        progress.note(f"fused group of {members[0].cell_id} failed: {type(e).__name__}: {e} (retried on the next run)")
        return GroupTurn([m.outcome for m in members], trained_seconds=time.perf_counter() - train_started
                         - between_epochs, given_back=given_back)
    return GroupTurn([m.outcome for m in members], trained_seconds=trained, given_back=given_back)


def _give_back(members: list[_Member], tracker: Tracker) -> None:
    """Claims this turn will not train: back to the queue at once (their runs closed KILLED where started)."""
    for m in members:
        if m.run_id:
            release(m.claim, m.run_id, tracker)
        else:
            give_back(m.claim)


def _settle(members: list[_Member], tracker: Tracker) -> None:
    """On the way out: a member the ledger already has keeps it, the others go back to the queue."""
    for m in members:
        if m.run_id:
            settle(m.claim, m.run_id, tracker)
        else:
            give_back(m.claim)


def _finish(m: _Member, result: Any, tracker: Tracker, progress: Progress) -> str:
    """Record one member's result as `run_cell` records a cell's; LOST when its claim went elsewhere."""
    if result is None:
        return lost_claim(m.cell_id, m.run_id, tracker, progress)
    try:
        if not m.claim.held(ask=True):
            raise ClaimLostError(f"trial {m.claim.trial.number} was taken over")
        tracker.log_telemetry(m.run_id, result.telemetry)  # per member, through vmap's outputs (train/fused.py)
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
