"""What a worker claims for its next turn (sweep/worker.py): the first queued cell of its jobs, then the cells fused
with it (sweep/group_run.py `fill_group`), within a job's in-flight bound (sweep/plan.py Job.max_in_flight: a TPE
search's, contracts/tuning.py `search_in_flight`).

A bounded job counts its RUNNING cells and claims under a lock of its own (Ledger.queue_guard on the study's name and
`#in-flight`: an OS lock beside a journal, an advisory lock on PostgreSQL), so workers that start together, fused or
not, never pass the bound: unlocked, two fused workers each counted the other's group half-claimed and took the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from optuna.trial import TrialState

from normbench.store.claim import Claim
from normbench.store.ledger import Ledger
from normbench.sweep.fuse_plan import FusePlan
from normbench.sweep.group_run import fill_group
from normbench.sweep.plan import Job


def room(job: Job, ledger: Ledger) -> int | None:
    """How many more of the job's cells may start now (Job.max_in_flight less those RUNNING); None: no bound."""
    if job.max_in_flight is None:
        return None
    return max(0, job.max_in_flight - len(ledger.trials(job.study, (TrialState.RUNNING,))))


def claim_turn(ledger: Ledger, jobs: list[Job], fuse: FusePlan, fusable: Callable[[Claim], bool],
               wait: bool) -> tuple[Job, list[Claim]] | None:
    """The first job's queued cell, in `jobs`' order, and (`fuse.k` > 1, `fusable(first)`) the cells of its row to
    fuse with it, at most its job's room; `wait`: a stage's first group may wait a moment to fill (fill_group). None:
    no job has a cell it may start now."""
    for job in jobs:
        if job.max_in_flight is None:
            if (first := ledger.claim(job.study, job.listed)) is not None:
                return job, _group(ledger, job, first, fuse, jobs, fusable, wait)
            continue
        with ledger.queue_guard(f"{job.study.study_name}#in-flight"):
            left = room(job, ledger)
            if left and (first := ledger.claim(job.study, job.listed)) is not None:
                return job, _group(ledger, job, first, replace(fuse, k=min(fuse.k, left)), jobs, fusable, wait)
    return None


def _group(ledger: Ledger, job: Job, first: Claim, fuse: FusePlan, jobs: list[Job],
           fusable: Callable[[Claim], bool], wait: bool) -> list[Claim]:
    if fuse.k > 1 and fusable(first):
        return fill_group(ledger, job, first, fuse, jobs, wait=wait)
    return [first]
