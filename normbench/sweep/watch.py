"""The parent of local workers: report what they finish and queue, wait for them, stop them on Ctrl-C or SIGTERM."""

from __future__ import annotations

import subprocess

from optuna.trial import FrozenTrial, TrialState

from normbench import stopping
from normbench.contracts.results import CellResult
from normbench.contracts.suite import Suite
from normbench.contracts.tuning import LABEL, recipe_axes
from normbench.store.ledger import Ledger
from normbench.sweep.adopt import donors_of
from normbench.sweep.launch import stop_workers
from normbench.sweep.progress import Progress, note_new_cells
from normbench.sweep.run import pace_of, queued_cells, stage_study_names
from normbench.sweep.worker import WorkSummary
from normbench.sweep.worker_exits import WorkerProcess, after_exit

WATCH_SECONDS = 2.0


def newly_finished(ledger: Ledger, study_names: list[str], seen: set[tuple[str, int]]) -> list[FrozenTrial]:
    """Finished trials of the studies not in `seen` (`(study, number)` pairs, updated in place)."""
    existing = set(ledger.study_names())
    new = []
    for name in (n for n in study_names if n in existing):
        for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE, TrialState.PRUNED)):
            if (name, t.number) not in seen:
                seen.add((name, t.number))
                new.append(t)
    return new


class WorkerWatch:
    """What the parent has reported so far. Cells finished before the workers started are not reported again."""

    def __init__(self, suite: Suite, ledger: Ledger, progress: Progress, study_names: list[str]) -> None:
        self.suite, self.ledger, self.progress, self.study_names = suite, ledger, progress, study_names
        self.seen: set[tuple[str, int]] = set()
        self.counted = {cid for name in stage_study_names(ledger, suite)  # in the progress total already
                        for cid in queued_cells(ledger, name)}
        self.reported = 0
        newly_finished(ledger, self.watched(), self.seen)

    def watched(self) -> list[str]:
        """The studies whose finished cells are reported, with the bracketing rounds and report stage queued since."""
        rounds = stage_study_names(self.ledger, self.suite)
        for name in rounds:
            new = {cid: axes for cid, axes in queued_cells(self.ledger, name).items() if cid not in self.counted}
            if new:
                self.counted.update(new)
                donors = donors_of(self.suite)  # cells a worker copied finished from a donor folder: no cost left
                adopted = donors.holding(new) if donors is not None else set()
                if to_train := {cid: axes for cid, axes in new.items() if cid not in adopted}:
                    note_new_cells(self.progress, self.suite, name, to_train, pace_of(self.ledger, self.suite))
                if adopted:
                    self.progress.add(dict.fromkeys(adopted, 0.0))  # counted done as `report` finds them finished
                    self.progress.note(f"adopted {len(adopted)} finished cell(s) of this recipe from "
                                       f"{donors.sources(adopted)} instead of training them")
        return [*self.study_names, *(n for n in rounds if n not in self.study_names)]

    def report(self) -> None:
        names = self.watched()
        for t in newly_finished(self.ledger, names, self.seen):
            stored = t.user_attrs.get("result")
            self.progress.record(t.user_attrs.get(LABEL) or t.user_attrs.get("cell_id", f"trial {t.number}"),
                                 CellResult.from_summary(stored) if stored else None,
                                 where=f"  (worker {t.user_attrs.get('worker_pid', '?')})")
            self.reported += 1
        self.progress.running(self.in_flight(names))

    def in_flight(self, study_names: list[str]) -> dict[str, float]:
        """`{cell_id: fraction of its epochs reported}` of the cells the workers are training (each epoch is an
        Optuna intermediate value of its trial)."""
        existing = set(self.ledger.study_names())
        fractions = {}
        for name in (n for n in study_names if n in existing):
            for t in self.ledger.trials(self.ledger.study(name), (TrialState.RUNNING,)):
                if "axes" in t.user_attrs and "cell_id" in t.user_attrs and LABEL not in t.user_attrs:  # not tune's
                    # a tune confirmation's axes name its search trial, which is no recipe key
                    epochs = self.suite.cell(recipe_axes(t.user_attrs["axes"])).config.train.epochs
                    fractions[t.user_attrs["cell_id"]] = min(1.0, len(t.intermediate_values) / max(1, epochs))
        return fractions


def wait_for_workers(procs: list[subprocess.Popen], watch: WorkerWatch) -> WorkSummary:
    """Report each cell's result as a worker finishes it until every worker has exited. A worker that dies holding
    a cell is replaced while cells remain or a peer works (sweep/worker_exits.py), so this process never trains a
    cell that kills."""
    ended: set[int] = set()
    try:
        while True:
            for p in [p for p in procs if p.poll() is not None and p.pid not in ended]:
                ended.add(p.pid)
                peers_alive = any(q.poll() is None for q in procs if q is not p)
                if isinstance(p, WorkerProcess) and (double := after_exit(p, watch.ledger, watch.watched(),
                                                                          peers_alive)):
                    procs.append(double)
            if all(p.pid in ended for p in procs):
                break
            stopping.wait(WATCH_SECONDS)
            watch.report()
        watch.report()  # and those finished since the last look
    except KeyboardInterrupt as stop:
        stop_workers(procs, stop)
        raise
    failed = [p.returncode for p in procs if p.returncode]
    if failed:
        watch.progress.note(f"{len(failed)} worker(s) exited with {failed}; their cells went back to the queue")
    return WorkSummary(cells_run=watch.reported, errors=len(failed))
