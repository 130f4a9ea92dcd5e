"""`--time-limit`: a worker starts no cell (or fused group) that this host's pace says would end past the limit.

A run on a machine it holds for a fixed time (a SLURM job's `--time`, a lent or spot machine) loses the cell in
flight at the end wherever its checkpoint does not outlive the machine: an hour of training for nothing. With a
limit, the cells that would not fit wait in the ledger for the next run, and the run ends on its own before the
machine does, with every result recorded and its leaderboard written.

The estimate is this host's (sweep/pace.py): a shape it trained costs its median seconds per epoch, another shape
the median pace per depth-epoch; a fused group costs the sum of its members' shares, and a cell the epochs its
checkpoint on this machine leaves (all of them without one: a checkpoint recorded elsewhere is not here to resume).
Before any cell finished here the cost is unknown and the cell starts; past the limit nothing starts."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from normbench.errors import NormbenchError
from normbench.sweep.cell_end import give_back
from normbench.sweep.checkpoints import CHECKPOINT_ATTR, CHECKPOINT_FILE, CheckpointFolder

if TYPE_CHECKING:
    from normbench.store.claim import Claim
    from normbench.sweep.pace import Pace
    from normbench.sweep.plan import Job
    from normbench.sweep.progress import Progress

TIME_LIMITED = 75  # the exit code of a run that stopped at its limit with cells left (sysexits' EX_TEMPFAIL)
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> float:
    """Seconds in '2h30m', '90m', '45s', '1d', or SLURM's 'HH:MM:SS' / 'MM:SS'; NormbenchError naming the forms."""
    text = text.strip().lower()
    seconds: float | None = None
    if re.fullmatch(r"(\d+:){1,2}\d+", text):
        seconds = float(sum(int(part) * 60 ** i for i, part in enumerate(reversed(text.split(":")))))
    elif text and re.fullmatch(r"(\d+(\.\d+)?[dhms])+", text):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in re.findall(r"(\d+(?:\.\d+)?)([dhms])", text))
    if seconds is None or seconds <= 0:
        raise NormbenchError(f"{text!r}: give a positive duration with its unit, e.g. 2h30m, 90m, 45s, "
                             "or HH:MM:SS (a SLURM job's --time less a margin for the leaderboard)")
    return seconds


@dataclass(frozen=True)
class TimeLimit:
    """The wall-clock time (`time.time()`, so a run's local workers share it) past which no cell starts."""

    stop_by: float

    @classmethod
    def after(cls, seconds: float) -> TimeLimit:
        return cls(time.time() + seconds)

    def left(self) -> float:
        return self.stop_by - time.time()

    def refusal(self, seconds: float | None) -> str:
        """Why a turn estimated at `seconds` (None: unknown) may not start, or '' when it may."""
        left = self.left()
        if left <= 0:
            return "the time limit has passed"
        if seconds is not None and seconds > left:
            return (f"it would take about {seconds / 60:.0f} min at this host's pace, and {left / 60:.0f} min are "
                    "left")
        return ""


def turn_seconds(pace: Pace, job: Job, claims: list[Claim], checkpoints: CheckpointFolder | None) -> float | None:
    """What training `claims` (one cell, or a fused group) takes here, in seconds; None before any cell finished
    here (sweep/pace.py)."""
    if not pace.per_depth_epoch:
        return None
    total = 0.0
    for claim in claims:
        cell_id, _, config = job.cell_for(claim)
        done = epochs_checkpointed_here(claim, job.study.study_name, cell_id, checkpoints)
        left = max(0, config.train.epochs - done)
        seconds = pace.seconds(claim.trial.user_attrs.get("axes", {}), config.model.depth, left)
        if seconds is None:
            return None
        total += seconds
    return total


def epochs_checkpointed_here(claim: Claim, study: str, cell_id: str, checkpoints: CheckpointFolder | None) -> int:
    """The epochs the claim's recorded checkpoint holds, where its file is on this machine (where sweep/checkpoints.py
    `resume` looks: the recorded file, else the cell's own path); 0 without one."""
    record = claim.trial.user_attrs.get(CHECKPOINT_ATTR) or {}
    if checkpoints is None or not record.get("epoch"):
        return 0
    places = [checkpoints.cell(study, cell_id) / CHECKPOINT_FILE]
    if record.get("file"):
        places.append(checkpoints.root / record["file"])
    return int(record["epoch"]) if any(p.is_file() for p in places) else 0


def leave_queued(job: Job, claims: list[Claim], why: str, progress: Progress) -> str:
    """Give `claims` back untouched (no attempt counted: the next run starts them); returns the line that says so."""
    for claim in claims:
        give_back(claim)
    cell = job.cell_for(claims[0])[0]
    what = f"{len(claims)} cells of the row of {cell}" if len(claims) > 1 else f"cell {cell}"
    said = f"{what} did not start: {why}"
    progress.note(f"time limit: {said}; {'they wait' if len(claims) > 1 else 'it waits'} in the ledger for the next "
                  "run")
    return said
