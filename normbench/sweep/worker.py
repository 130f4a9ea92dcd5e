"""The worker loop shared by `run`, `tune` and `worker`: claim a cell from the ledger, train it, log it, finish it.

The ledger is the truth: a cell counts once COMPLETE there; a crash before that re-runs it. MLflow is a view (rebuilt
by tracking/sync.py), so live logging is queued and never waits (tracking/tracker.py); the next `normbench sync`
settles runs left RUNNING. A worker whose claim was taken over (stalled past the heartbeat grace) stops that cell and
closes its run KILLED. A cell that kills its worker NORMBENCH_MAX_ATTEMPTS times in a row, its checkpoint never moving
on, is failed for good (store/attempts.py: an attempt preempted while progressing is not counted)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from normbench import settings, stopping
from normbench.contracts.recipe import CellConfig
from normbench.contracts.results import EpochRecord
from normbench.errors import ClaimLostError, NormbenchError
from normbench.store.attempts import ATTEMPTS, failed_for_good, reclaim
from normbench.store.claim import Claim
from normbench.store.ledger import UNFINISHED, Ledger
from normbench.sweep.cell_end import (
    DISK_FULL,
    FAILED,
    LOST,
    TRAINED,
    give_back,
    given_back_on_stop,
    ledger_state,
    lost_claim,
    release,
    replay,
    settle,
)
from normbench.sweep.checkpoints import CellCheckpoints, CheckpointFolder
from normbench.sweep.fuse_plan import FusePlan, plan_for, slug_of
from normbench.sweep.group_run import row_key, run_group
from normbench.sweep.plan import Job, Plan
from normbench.sweep.progress import Progress
from normbench.sweep.time_limit import TimeLimit, leave_queued, turn_seconds
from normbench.sweep.turn_claims import claim_turn
from normbench.tracking.tracker import Tracker
from normbench.train.cpu_share import CpuShare
from normbench.train.device import resolve_device
from normbench.train.distributed import Dist, broadcast
from normbench.train.loop import CellAbandoned, train_cell

UNFUSED = FusePlan()  # --fuse 1
MAX_FINISHED_STAGES = 32  # stages queued finished in a row before a worker calls its suite done


def poll_seconds() -> float:
    """NORMBENCH_POLL_SECONDS (default 2): an idle worker's turn. A large fleet raises it (docs/cluster.md: load)."""
    return settings.current().poll_seconds


@dataclass
class WorkSummary:
    """What a worker did. `busy_seconds`: wall time of the turns that ran a cell; `train_seconds`: the training part."""

    cells_run: int = 0  # trained here to their end, or failed here (`errors`)
    errors: int = 0
    lost_claims: int = 0  # cells another worker took over mid-way: recorded once, by that worker
    busy_seconds: float = 0.0
    train_seconds: float = 0.0
    failed_for_good: dict[str, int] = field(default_factory=dict)  # cell id -> attempts, when the work ended
    time_limited: str = ""  # why it stopped at --time-limit with cells left (sweep/time_limit.py)

    def add(self, other: WorkSummary) -> None:
        self.cells_run += other.cells_run
        self.errors += other.errors
        self.lost_claims += other.lost_claims
        self.busy_seconds += other.busy_seconds
        self.train_seconds += other.train_seconds
        self.failed_for_good.update(other.failed_for_good)
        self.time_limited = self.time_limited or other.time_limited

    def tally(self, outcomes: list[str], train_seconds: float, busy_seconds: float) -> None:
        """Count a turn's cells (their outcomes: TRAINED, FAILED, LOST) and its seconds."""
        self.cells_run += sum(o != LOST for o in outcomes)
        self.errors += sum(o == FAILED for o in outcomes)
        self.lost_claims += sum(o == LOST for o in outcomes)
        self.train_seconds += train_seconds
        self.busy_seconds += busy_seconds

    def failed_line(self) -> str:
        """One line naming the cells failed for good and the way to retry them, or '' when there are none."""
        if not self.failed_for_good:
            return ""
        cells = sorted(self.failed_for_good)
        named = "; ".join(cells[:5]) + (f"; and {len(cells) - 5} more" if len(cells) > 5 else "")
        tries = sorted(set(self.failed_for_good.values()))
        return (f"{len(cells)} cell(s) failed for good, each killed its worker on {' or '.join(map(str, tries))} "
                f"attempts in a row, none moving its checkpoint on (OOM kill, segfault, watchdog?): {named}. The "
                "leaderboard's 'failed for good' section lists each attempt's host, pid and verdict; fix the cause, "
                "then run the same command with --retry-failed to give them another round")

    def bookkeeping(self) -> str:
        """'ledger + MLflow: 1.2 s of 80.0 s (1.5%)', or '' when this process ran no cell."""
        if not self.busy_seconds:
            return ""
        spent = self.busy_seconds - self.train_seconds
        return f"ledger + MLflow: {spent:.1f} s of {self.busy_seconds:.1f} s ({100 * spent / self.busy_seconds:.1f}%)"


def work(plan: Plan, ledger: Ledger, tracker: Tracker, device: str, progress: Progress,
         suite_name: str, time_limit: TimeLimit | None = None, dist: Dist | None = None,
         checkpoints: CheckpointFolder | None = None, fuse: int | str | FusePlan = 1) -> WorkSummary:
    """Run cells until every study of `plan` (the next stage queued when they run dry) is finished, or the next would
    not end before `time_limit` (sweep/time_limit.py); under torchrun, as rank 0. `fuse`: up to that many cells of a
    row that differ only in what train/fusion_rules.py allows (lr, seed, epochs, warmup; a tune trial's weight decay,
    beta2 and init-only layer tunables) train as one fused model (sweep/group_run.py); "auto" as
    the device's fuse bench says, else sweep/fuse_plan.py's constants (on CUDA only); or a FusePlan."""
    fuse = fuse if isinstance(fuse, FusePlan) else fuse_plan(fuse, device)
    try:
        summary = _work(plan, ledger, tracker, device, progress, suite_name, time_limit, dist, checkpoints, fuse)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the cell was given back and its ranks told; let them return
        broadcast(None, dist)
        raise
    finally:
        ledger.close()
    broadcast(None, dist)  # no more cells: the following ranks return
    return summary


def follow(device: str, dist: Dist) -> int:
    """Ranks other than 0 under torchrun: train each cell rank 0 sends, with it, until it sends None."""
    cells = 0
    while (config := broadcast(None, dist)) is not None:
        resume_from = broadcast(None, dist)  # rank 0's checkpoint of this cell (a file every rank reads), or None
        try:
            train_cell(config, device=device, dist=dist, resume=read_checkpoint(resume_from, config))
        except CellAbandoned:  # rank 0 lost the claim or was stopped: wait for its next cell (or None)
            continue
        cells += 1
    return cells


def fuse_plan(fuse: int | str, device: str) -> FusePlan:
    """`--fuse` for this worker's device (sweep/fuse_plan.py), from the fuse bench of this GPU when there is one."""
    dev = resolve_device(device)
    if fuse != "auto" or dev.type != "cuda":
        return plan_for(fuse, dev.type)
    from normbench.train.device import device_name

    return plan_for(fuse, dev.type, slug_of(device_name(dev)))


def local_workers(device: str, fuse: int | str | FusePlan) -> int:
    """`--workers` left out: one per GPU (sweep/launch.py), times the fused workers per GPU that `--fuse auto`'s plan
    names on CUDA; 1 on a CPU."""
    from normbench.sweep.launch import default_workers

    gpus = default_workers(device)
    if fuse != "auto" or resolve_device(device).type != "cuda":
        return gpus
    return gpus * fuse_plan(fuse, device).workers


def _work(plan: Plan, ledger: Ledger, tracker: Tracker, device: str, progress: Progress,
          suite_name: str, time_limit: TimeLimit | None, dist: Dist | None,
          checkpoints: CheckpointFolder | None = None, fuse: FusePlan = UNFUSED) -> WorkSummary:
    share = CpuShare.sign_in() if dist is None and resolve_device(device).type == "cpu" else None
    try:
        return _work_loop(plan, ledger, tracker, device, progress, suite_name, time_limit, dist, checkpoints, share,
                          fuse)
    finally:
        if share is not None:
            share.close()


def _work_loop(plan: Plan, ledger: Ledger, tracker: Tracker, device: str, progress: Progress,
               suite_name: str, time_limit: TimeLimit | None, dist: Dist | None,
               checkpoints: CheckpointFolder | None, share: CpuShare | None, fuse: FusePlan = UNFUSED) -> WorkSummary:
    summary = WorkSummary()
    unfusable: set[str] = set()  # rows whose first fused step failed here: trained one by one from then on
    poll = poll_seconds()  # a bad setting is refused before the first claim, not when the queue runs dry
    current = plan.jobs()
    stage_start = True  # the first group of a stage may wait a moment to fill (its peers may be queueing it)
    finished_stages = 0  # stages in a row that were queued finished (every cell adopted)
    while True:
        stopping.check()  # between cells
        turn_started = time.perf_counter()
        for job in current:
            reclaim(ledger, job.study)  # dead workers' cells back to the queue (their runs: the next sync's)
        turn = claim_turn(ledger, current, fuse, wait=stage_start, fusable=lambda c: dist is None and row_key(
            c.trial.user_attrs.get("axes", {})) not in unfusable)
        if turn is not None:
            finished_stages = 0
            stage_start = stage_start and fuse.k <= 1  # a stage's first group only waits to fill
            job, claims = turn
            first = claims[0]
            with given_back_on_stop(list(claims)):  # the turn's claims: none stays RUNNING after a stop
                if share is not None:
                    share.apply()  # the cores' share now: another run may have started or ended since the last cell
                estimate = turn_seconds(plan.pace(), job, claims, checkpoints) if time_limit is not None else None
                if time_limit is not None and (why := time_limit.refusal(estimate)):
                    summary.time_limited = leave_queued(job, claims, why, progress)
                    return summary
                if len(claims) > 1:
                    turn = run_group(job, claims, tracker=tracker, device=device, progress=progress,
                                     suite_name=suite_name, checkpoints=checkpoints, share=share, jobs=current,
                                     compile=fuse.compile, graphs=fuse.graphs)
                    if turn.unfusable:
                        unfusable.add(row_key(first.trial.user_attrs.get("axes", {})))
                    if turn.alone is not None:  # not fused: it trains alone below; the others went back to the queue
                        progress.note(f"cells of the row of {job.cell_for(first)[0]} train one by one: {turn.refused} "
                                      f"({turn.given_back} given back to the queue)")
                    summary.tally(turn.outcomes, turn.trained_seconds, time.perf_counter() - turn_started)
                    claims, turn_started = [turn.alone] if turn.alone is not None else [], time.perf_counter()
                for claim in claims:
                    outcome, trained = run_cell(job, claim, ledger=ledger, tracker=tracker, device=device,
                                                progress=progress, suite_name=suite_name, dist=dist,
                                                checkpoints=checkpoints, share=share)
                    summary.tally([outcome], trained, time.perf_counter() - turn_started)
                    turn_started = time.perf_counter()
            continue
        if unfinished(current, ledger):
            if time_limit is not None and time_limit.left() <= 0:  # what the others train is theirs to finish
                summary.time_limited = "the time limit has passed"
                return summary
            stopping.wait(poll)  # others are training; if one dies, its cell comes back to the queue
            continue
        known = queued_trials(current, ledger)
        plan.queue_next()
        current = plan.jobs()
        stage_start = True
        # the next stage's cells, in a new study or in one already here (a report stage queued again): judged by
        # its cells, not its study names, or the worker that queued them would leave the rest to its peers
        if not unfinished(current, ledger):
            # a stage queued finished (adopted from a donor folder): the next may follow it now; asking again adds
            # nothing once no stage is left (and a bound keeps a queue that only ever adds finished records finite)
            finished_stages += 1
            if queued_trials(current, ledger) > known and finished_stages <= MAX_FINISHED_STAGES:
                continue
            summary.failed_for_good = failed_cells(current, ledger)  # nothing left to run: what will never finish
            return summary



def unfinished(jobs: list[Job], ledger: Ledger) -> bool:
    """Whether any of the jobs' own cells waits or trains."""
    return any(job.listed(t) for job in jobs for t in ledger.trials(job.study, UNFINISHED))


def queued_trials(jobs: list[Job], ledger: Ledger) -> int:
    """How many trials the jobs' studies hold, in any state: grows whenever a stage is queued, even one whose every
    cell was adopted finished."""
    return sum(len(ledger.trials(job.study)) for job in jobs)


def failed_cells(jobs: list[Job], ledger: Ledger) -> dict[str, int]:
    """`{cell id: attempts}` of the jobs' cells failed for good (each attempt killed its worker)."""
    return {t.user_attrs.get("cell_id", f"trial {t.number}"): len(t.user_attrs.get(ATTEMPTS, []))
            for job in jobs for t in ledger.call(failed_for_good, job.study) if job.listed(t)}


def run_cell(job: Job, claim: Claim, *, ledger: Ledger, tracker: Tracker, device: str, progress: Progress,
             suite_name: str, dist: Dist | None = None,
             checkpoints: CheckpointFolder | None = None, share: CpuShare | None = None) -> tuple[str, float]:
    """Train one claimed cell. Returns its outcome, TRAINED, FAILED (it raised: a failed trial, retried next run) or
    LOST (another worker took the claim over), and the seconds spent training (not the between-epoch logging)."""
    trial = claim.trial
    run_id = ""
    try:  # a stop before training starts (reading a checkpoint takes a while) gives the cell back, as one during it
        cell_id, run, config = job.cell_for(claim)
        run_id = tracker.start(run)  # queued: never waits for MLflow
        if not claim.held(ask=True):  # stalled between the claim and here: another worker's cell now
            return lost_claim(cell_id, run_id, tracker, progress), 0.0
        progress.start_cell(cell_id, config.train.epochs)
        kept = CellCheckpoints(checkpoints, job.study.study_name, cell_id, config) if checkpoints is not None else None
        resume = kept.resume(trial, dist.world if dist else 1) if kept is not None else None
        if resume is not None:  # this attempt's run and trial get the epochs the checkpoint holds
            replay(resume["progress"]["history"], claim, run_id, tracker, progress)
    except (KeyboardInterrupt, NormbenchError):
        if run_id:
            release(claim, run_id, tracker)
        else:
            give_back(claim)
        raise
    between_epochs = 0.0

    def on_epoch(record: EpochRecord) -> bool:
        nonlocal between_epochs
        started = time.perf_counter()
        if not claim.held():  # another worker took this cell over: stop training it
            raise ClaimLostError(f"trial {trial.number} was taken over")
        if share is not None:  # a run started mid-cell halves this one's cores now, not after a 10-minute cell
            share.apply()
        tracker.log_epoch(run_id, record)
        progress.epoch(record)
        claim.report(record["val_top1"], record["step"])  # at step = optimizer steps
        prune = job.may_prune(record["epoch"], config.train.epochs) and claim.should_prune()
        between_epochs += time.perf_counter() - started
        return prune

    train_started = time.perf_counter()
    try:
        with claim.heartbeat():
            broadcast(config, dist)  # the other ranks train the same cell, from the same checkpoint
            broadcast(str(kept.resumed_from) if resume is not None and kept is not None else None, dist)
            result = train_cell(config, device=device, on_epoch=on_epoch, dist=dist, resume=resume,
                                keeper=kept.keeper(claim) if kept is not None else None)
    except ClaimLostError:
        return lost_claim(cell_id, run_id, tracker, progress), time.perf_counter() - train_started - between_epochs
    except (KeyboardInterrupt, NormbenchError):  # stop the suite; the cell goes back to the queue
        release(claim, run_id, tracker)
        raise
    except Exception as e:  # a crash in one cell must not take the suite down
        if isinstance(e, OSError) and e.errno in DISK_FULL:  # the disk's fault, not the cell's: stop, give it back
            release(claim, run_id, tracker)
            raise
        try:
            claim.fail(f"{type(e).__name__}: {e}")
        except ClaimLostError:  # already failed as stale and queued again: nothing more to record here
            pass
        except NormbenchError:  # the ledger could not record it (a full disk): give the cell back, stop the run
            release(claim, run_id, tracker)
            raise
        tracker.fail(run_id)
        progress.note(f"cell {cell_id} failed: {type(e).__name__}: {e} (it is retried on the next run)")
        if dist is not None:  # the other ranks may be inside a collective: end the group (torchrun stops them)
            raise
        return FAILED, time.perf_counter() - train_started - between_epochs
    trained = time.perf_counter() - train_started - between_epochs
    try:
        if not claim.held(ask=True):
            raise ClaimLostError(f"trial {trial.number} was taken over")
        tracker.log_telemetry(run_id, result.telemetry)
        tracker.summarize(run_id, result)
        if kept is not None and (weights := kept.before_finish(claim)) is not None:
            tracker.log_artifact(run_id, weights)
        claim.finish(result)  # the cell counts from here
        if kept is not None:
            kept.clean()  # a finished cell leaves no checkpoint behind
        tracker.close(run_id, ledger_state(result))
    except ClaimLostError:
        return lost_claim(cell_id, run_id, tracker, progress), trained
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the result is logged: no trial or run may stay RUNNING
        settle(claim, run_id, tracker)
        raise
    progress.end_cell(result)
    return TRAINED, trained


def read_checkpoint(path: str | None, config: CellConfig) -> dict[str, Any] | None:
    """A following rank's copy of the checkpoint rank 0 resumes from (rank 0 checked it; None: start over)."""
    if path is None:
        return None
    from pathlib import Path

    from normbench.train.checkpoint import read, recipe_of

    return read(Path(path), recipe_of(config))
