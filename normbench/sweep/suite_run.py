"""The one composition root of `normbench run`, `tune` and `worker`: `SuiteRun` builds ledger, tracker, jobs, progress.

    suite -> SuiteRun(mode) -> jobs (sweep/run.py, sweep/tune.py) -> worker loop (sweep/worker.py) -> train_cell
          -> ledger (store/) + live MLflow runs (tracking/) -> leaderboard (report/) + MLflow sync (tracking/sync.py)

The parent (`run`, `tune`) owns OUT (checks, suite copy, local workers, leaderboard); a worker joins its studies."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

from normbench.contracts.names import OutputFolder, study_suite, suites_in
from normbench.contracts.suite import Suite
from normbench.contracts.tuning import check_space_values
from normbench.errors import NormbenchError
from normbench.store import reserve
from normbench.store.attempts import reclaim
from normbench.store.journal import ledger_identity, repair_tail
from normbench.store.ledger import Ledger, max_attempts_from_env
from normbench.store.locks import journal_lock_grace
from normbench.sweep.checkpoints import CheckpointFolder
from normbench.sweep.launch import start_workers, worker_command
from normbench.sweep.progress import Progress
from normbench.sweep.run import open_run
from normbench.sweep.select_only import check_select_only, choosing_only, leave_out_scoring, scoring_cells_left
from normbench.sweep.suite_snapshot import changed_since, take_snapshot
from normbench.sweep.time_limit import TimeLimit
from normbench.sweep.tune import open_tune
from normbench.sweep.watch import WorkerWatch, wait_for_workers
from normbench.sweep.worker import WorkSummary, local_workers, work
from normbench.tracking.tracker import Tracker
from normbench.train.distributed import Dist

MODES = {"run": open_run, "tune": open_tune}
# what a mode refuses from the suite alone, checked before OUT or its ledger exist: a refused start writes nothing
SUITE_CHECKS = {"run": lambda suite: None, "tune": check_space_values}


def preflight(suite: Suite, device: str | None) -> str:
    """The checked device, after loading the dataset once: a missing GPU or dataset fails here, not in every cell."""
    from normbench.data import build_data
    from normbench.train.device import resolve_device

    device = device or suite.device
    resolve_device(device)
    build_data(suite.dataset, batch_size=1, device="cpu", seed=0)
    return device


class SuiteRun:
    """A suite's ledger, tracker, jobs and progress for `mode`; `parent=True` also checks OUT and snapshots the suite
    (sweep/suite_snapshot.py). Another recipe's ledger is refused first: no journal repair, no MLflow store."""

    def __init__(self, suite: Suite, out_dir: Path, *, storage: str | None = None, mode: str = "run",
                 quiet: bool = False, parent: bool = True, checkpoint_dir: Path | None = None,
                 fuse: int | str = 1, time_limit: TimeLimit | None = None, select_only: bool = False) -> None:
        self.suite, self.storage, self.mode = suite, storage, mode
        SUITE_CHECKS[mode](suite)
        if select_only:
            check_select_only(suite, mode)
        self.time_limit = time_limit  # --time-limit: no cell starts that would end past it (sweep/time_limit.py)
        self.checkpoint_dir = checkpoint_dir  # --checkpoint-dir; None: OUT/checkpoints
        self.fuse = fuse  # --fuse: cells trained as one fused model (sweep/group_run.py)
        self.select_only = select_only  # --select-only: no cell that scores the folder (sweep/select_only.py)
        self.folder = OutputFolder(out_dir)
        self.snapshot = take_snapshot(suite) if parent else None  # before anything is written
        max_attempts = max_attempts_from_env()  # a bad setting is refused before the folder is created
        journal_lock_grace()
        if parent:
            check_output_folder(self.folder)
        self.ledger = Ledger(storage, self.folder.path, max_attempts=max_attempts)
        check_folder_suite(suite, self.folder, self.ledger if storage is None else None)
        self.jobs, self.study_names, self.progress = MODES[mode](suite, self.ledger, self.folder.path, quiet=quiet)
        if select_only:
            self.jobs = choosing_only(self.jobs)
            leave_out_scoring(self.progress, self.ledger, suite, mode)
        # past the refusals (the recipe check is in MODES): repair, which a refused run must not do
        repair_tail(self.ledger.journal)
        self.tracker = Tracker(self.folder.path, suite.name, parent_tags={
            "recipe": suite.recipe_hash(), "ledger": ledger_identity(self.ledger.journal)})
        reserve.keep(self.folder.path)
        if parent:
            save_suite_copy(suite, self.folder, self.snapshot)

    def work(self, device: str, workers: int | None = None, dist: Dist | None = None) -> WorkSummary:
        """Run cells in `workers` local processes (if > 1), then here: all when alone, else what a dead worker left."""
        workers = workers or local_workers(device, self.fuse)  # --fuse auto on CUDA: its fused workers per GPU
        summary = WorkSummary()
        try:
            return self._work(device, workers, dist, summary)
        finally:
            self.tracker.finish()  # the live runs' last writes, before a sync (or the next run's) reads them

    def _work(self, device: str, workers: int, dist: Dist | None, summary: WorkSummary) -> WorkSummary:
        if workers > 1:
            watch = WorkerWatch(self.suite, self.ledger, self.progress, self.study_names)
            assert self.snapshot is not None, "local workers are a parent's"
            if changed_since(self.suite, self.snapshot):  # said even with --quiet: the file no longer says what runs
                print(f"normbench: warning: {self.suite.path} changed after this run read it; this run and its workers "
                      f"go on with the version it read (kept as {self.folder.suite}); the next run checks the change",
                      file=sys.stderr)
            procs = start_workers(dataclasses.replace(self.suite, path=self.snapshot), self.folder.path,
                                  storage=self.storage, device=device, workers=workers, mode=self.mode,
                                  checkpoint_dir=self.checkpoint_dir, fuse=self.fuse,
                                  stop_by=self.time_limit.stop_by if self.time_limit else None,
                                  select_only=self.select_only)
            try:
                summary = wait_for_workers(procs, watch)
            except KeyboardInterrupt:
                self.settle_claims()  # the workers have exited; what one could not give back on its way out
                raise
        summary.add(work(self.jobs, self.ledger, self.tracker, device, self.progress, self.suite.name,
                         time_limit=self.time_limit, dist=dist,
                         checkpoints=CheckpointFolder.of(self.folder.path, self.checkpoint_dir), fuse=self.fuse))
        return summary

    def settle_claims(self) -> None:
        """Reclaim gone workers' cells so none stays RUNNING after `run` (best effort: the next run gets the rest)."""
        try:
            for name in self.ledger.study_names():
                if study_suite(name) == self.suite.name:
                    reclaim(self.ledger, self.ledger.study(name))
        except Exception as e:
            print(f"normbench: warning: could not reclaim the workers' cells on the way out ({e}); the next run "
                  "does", file=sys.stderr)

    def finish(self, summary: WorkSummary) -> None:
        """Write the leaderboard, bring MLflow up to date from the ledger, and say where they are."""
        from normbench.report.leaderboard import write_leaderboard

        # the header names the folder's own copy of the suite, as `normbench leaderboard` reads it: one file either way
        suite = dataclasses.replace(self.suite, path=self.folder.suite)
        write_leaderboard(self.folder.path, suite=suite, storage=self.storage)
        synced(self.folder.path, self.storage, self.tracker.uri, self.progress)
        if summary.bookkeeping():
            self.progress.note(summary.bookkeeping())
        if self.select_only and (left := scoring_cells_left(self.ledger, self.suite)):  # said even with --quiet
            print(f"normbench: --select-only: {left} cell(s) that score the folder (report seeds, 2x, claim rounds, "
                  "tune's re-runs) wait queued for a run without it", file=sys.stderr)
        self.progress.note(f"leaderboard: {self.folder.leaderboard}")


def synced(out_dir: Path, storage: str | None, uri: str, progress: Progress) -> None:
    """Sync MLflow from the ledger (tracking/sync.py). A failure is a warning (even with --quiet), never a failed
    run: the ledger has every result, and `normbench sync OUT` repairs the view later."""
    from normbench.tracking.sync import sync

    try:
        progress.note(sync(out_dir, storage, uri).line())
    except NormbenchError as e:
        print(f"normbench: warning: {e}", file=sys.stderr)


def run_suite(suite: Suite, out_dir: Path, *, mode: str = "run", storage: str | None = None,
              device: str | None = None, workers: int | None = None, quiet: bool = False,
              checkpoint_dir: Path | None = None, fuse: int | str = "auto",
              time_limit: TimeLimit | None = None, select_only: bool = False) -> WorkSummary:
    """`normbench run` (mode "run") or `normbench tune` ("tune"): train every unfinished cell (those that fit before
    `time_limit`; with `select_only`, those that choose), write the leaderboard."""
    device = preflight(suite, device)
    if (workers or local_workers(device, fuse)) > 1:  # a layer no worker could import is refused before any file exists
        worker_command(suite, out_dir, storage=storage, device=device, mode=mode)
    suite_run = SuiteRun(suite, out_dir, storage=storage, mode=mode, quiet=quiet, checkpoint_dir=checkpoint_dir,
                         fuse=fuse, time_limit=time_limit, select_only=select_only)
    summary = suite_run.work(device, workers)
    suite_run.finish(summary)
    return summary


def join_suite(suite: Suite, out_dir: Path, *, mode: str = "run", storage: str | None = None,
               device: str | None = None, quiet: bool = False, dist: Dist | None = None,
               checkpoint_dir: Path | None = None, fuse: int | str = "auto",
               time_limit: TimeLimit | None = None, select_only: bool = False) -> WorkSummary:
    """`normbench worker`: train the suite's cells until none is left (or none fits before `time_limit`). Under
    torchrun rank 0 claims, the rest follow."""
    from normbench.sweep.worker import follow

    device = preflight(suite, device)
    if dist is not None and not dist.is_main:
        follow(device, dist)
        return WorkSummary()
    suite_run = SuiteRun(suite, out_dir, storage=storage, mode=mode, quiet=quiet, parent=False,
                         checkpoint_dir=checkpoint_dir, fuse=fuse, time_limit=time_limit, select_only=select_only)
    summary = suite_run.work(device, workers=1, dist=dist)
    if summary.bookkeeping():
        suite_run.progress.note(summary.bookkeeping())
    return summary


def check_output_folder(folder: OutputFolder) -> None:
    """Check OUT is writable and no output path is a folder, else NormbenchError (exit 2) naming it, before training."""
    try:
        folder.path.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"\0" * 4096)
        probe.unlink()
    except OSError as e:
        raise NormbenchError(f"{folder.path}: cannot write the output folder ({e.strerror}); make it writable, free "
                             "space, or pass another --out. Nothing was trained.") from None
    taken = [*OutputFolder.WRITTEN, *(p.name for pattern in OutputFolder.WRITTEN_PATTERNS
                                     for p in folder.path.glob(pattern))]
    for name in taken:
        if (folder / name).is_dir():
            raise NormbenchError(f"{folder / name}: is a folder, where normbench writes a file; move it away and "
                                 "run again. Nothing was trained.")


def check_folder_suite(suite: Suite, folder: OutputFolder, ledger: Ledger | None) -> None:
    """Refuse (NormbenchError, exit 2, naming --out) a folder of another suite, by suite.yaml or its own ledger (a
    shared database holds many), before its results.csv, leaderboard.md and suite.yaml are overwritten."""
    others = {name: where for name, where in _suites_in_folder(folder, ledger).items() if name != suite.name}
    if others:
        name, where = sorted(others.items())[0]
        raise NormbenchError(
            f"{folder.path}: holds suite `{name}` (named by {where}), not `{suite.name}`; an output folder belongs to "
            f"one suite, and this run would overwrite its results. Pass another --out for `{suite.name}` (e.g. --out "
            f"{folder.path.parent / suite.name}). Nothing was written.")


def _suites_in_folder(folder: OutputFolder, ledger: Ledger | None) -> dict[str, str]:
    """suite name -> what names it: the folder's journal ledger (`ledger`; None for a database) and its suite.yaml."""
    names = {name: str(folder.ledger) for name in suites_in(ledger.study_names())} if ledger is not None else {}
    saved = folder.saved_suite().get("name")  # none saved yet, or unreadable: the ledger alone tells
    if isinstance(saved, str):
        names.setdefault(saved, str(folder.suite))
    return names


def save_suite_copy(suite: Suite, folder: OutputFolder, source: Path | None = None) -> None:
    """OUT/suite.yaml, for `normbench leaderboard OUT`: `source` (the snapshot this run read), else the suite file."""
    folder.path.mkdir(parents=True, exist_ok=True)
    if suite.path.resolve() != folder.suite.resolve():
        tmp = folder / f".{OutputFolder.SUITE}.{os.getpid()}"
        shutil.copyfile(source or suite.path, tmp)
        tmp.replace(folder.suite)
