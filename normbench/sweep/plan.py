"""What a mode hands the worker loop (sweep/worker.py): its studies as jobs, and how to queue its next stage.

Its own module so that the loop's helpers (sweep/time_limit.py) can name a Job without importing the loop."""

from __future__ import annotations

import math
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
    # the share of a cell's epochs after which the study's pruner may stop it (tune's searches); None: never asked
    prune_after: float | None = None
    listed: Callable[[FrozenTrial], bool] = lambda trial: True  # the suite's own (contracts/matrix_scope.py)
    # the most of its cells in training at once, over every worker and fused group (None: no bound): a TPE search's
    # trials drawn together see one another only as running (constant liar), so a search keeps to the batch size of
    # its random startup draws wherever it trains (sweep/tune.py; counted and claimed under a lock: turn_claims.py)
    max_in_flight: int | None = None

    def may_prune(self, epoch: int, epochs: int) -> bool:
        """Whether the pruner is asked after (0-based) `epoch` of a cell of `epochs`: once `prune_after` of them
        are trained, at least one."""
        return self.prune_after is not None and epoch + 1 >= max(1, math.ceil(self.prune_after * epochs))


@dataclass
class Plan:
    """A mode's work (sweep/run.py, sweep/tune.py). `jobs()` reads: the jobs of the studies queued so far.
    `queue_next()` writes: it queues the next stage (a bracketing round, the report stage, tune's re-runs) once those
    before it are finished, and does nothing before; the worker loop calls it when its queue runs dry."""

    jobs: Callable[[], list[Job]]
    queue_next: Callable[[], None]
    pace: Callable[[], Pace] = Pace  # this host's pace on the mode's cells so far (`--time-limit`); none known

