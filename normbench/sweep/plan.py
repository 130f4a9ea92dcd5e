"""What a mode hands the worker loop (sweep/worker.py): its studies as jobs, and how to queue its next stage.

Its own module so that the loop's helpers (sweep/time_limit.py) can name a Job without importing the loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from normbench.contracts.recipe import CellConfig
from normbench.store.claim import Claim
from normbench.sweep.pace import Pace
from normbench.tracking.run_record import TrialRun


@dataclass
class Job:
    """One study's cells and how to turn a claimed trial into a recipe."""

    study: optuna.Study
    cell_for: Callable[[Claim], tuple[str, TrialRun, CellConfig]]  # -> cell_id, its MLflow run (cells.py), recipe
    report: bool = False  # feed per-epoch val accuracy to the study's pruner
    listed: Callable[[FrozenTrial], bool] = lambda trial: True  # the suite's own (contracts/matrix_scope.py)


@dataclass
class Plan:
    """A mode's work (sweep/run.py, sweep/tune.py). `jobs()` reads: the jobs of the studies queued so far.
    `queue_next()` writes: it queues the next stage (a bracketing round, the report stage, tune's re-runs) once those
    before it are finished, and does nothing before; the worker loop calls it when its queue runs dry."""

    jobs: Callable[[], list[Job]]
    queue_next: Callable[[], None]
    pace: Callable[[], Pace] = Pace  # this host's pace on the mode's cells so far (`--time-limit`); none known
