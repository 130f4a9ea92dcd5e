"""`normbench run` and `normbench worker`: the matrix of a suite, end to end, resumable.

Running the same command again after a crash, kill -9 or Ctrl-C resumes: finished cells are skipped, cut-off ones
run again. `--workers N` starts N local worker processes on the same ledger; `normbench worker` joins a suite
from another machine through a shared `--storage`. With bracketing (`--bracket`), cells beyond the lr grid's edge
are queued in rounds, each its own study `bracket:<suite>:<round>` in the same ledger, by whichever worker finds
every cell so far finished.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from normbench.errors import NormbenchError, SuiteError, Terminated
from normbench.spec.recipe import CellConfig
from normbench.spec.suite import Suite, cell_id
from normbench.store.ledger import LIVE, UNFINISHED, Ledger
from normbench.sweep.progress import Progress
from normbench.sweep.worker import Job, WorkSummary, work
from normbench.tracking.tracker import Tracker
from normbench.train.device import resolve_device


def run_study_name(suite: Suite) -> str:
    return f"run:{suite.name}"


def open_run_study(ledger: Ledger, suite: Suite) -> optuna.Study:
    """The suite's run study, refusing to resume a ledger trained with a different recipe."""
    return open_study_of_recipe(ledger, suite, run_study_name(suite))


def open_study_of_recipe(ledger: Ledger, suite: Suite, name: str, **study_kwargs: Any) -> optuna.Study:
    """Study `name`, stamped with the suite's recipe; refuses (SuiteError) when it was trained with another one."""
    study = ledger.study(name, **study_kwargs)  # an existing study loads without a write: a refused run leaves the
    check_recipe(ledger, suite, study)           # ledger byte for byte as it was
    if "recipe" not in study.user_attrs:
        study.set_user_attr("recipe", suite.recipe_hash())
    return study


def check_recipe(ledger: Ledger, suite: Suite, study: optuna.Study) -> None:
    """Refuse to add cells of this suite to `study` if its dataset/model/train sections changed since it trained."""
    recipe = study.user_attrs.get("recipe")
    if recipe is not None and recipe != suite.recipe_hash():
        raise SuiteError(f"{suite.path}: its dataset/model/train sections changed since the cells in this ledger "
                         f"({ledger.url}) were trained; resuming would mix recipes. Use another --out (or "
                         "--storage), or delete the old results. Changing only the matrix is fine.")


def cell_params(axes: dict[str, Any], config: CellConfig) -> dict[str, Any]:
    """What MLflow logs for a cell: its axes and recipe, with the data set's true split sizes (not the synthetic-only
    size knobs' defaults)."""
    from normbench.data import split_sizes
    from normbench.data.config import DATASET_ONLY_KEYS

    flat = {k: v for k, v in config.flat().items()
            if not (k.startswith("data.") and any(k[5:] in keys for name, keys in DATASET_ONLY_KEYS.items()
                                                  if name != config.data.name))}
    return {**axes, **flat, **{f"data.{k}": v for k, v in split_sizes(config.data).items()}}


def run_job(suite: Suite, study: optuna.Study) -> Job:
    def cell_for(trial: optuna.Trial) -> tuple[str, dict[str, Any], Any]:
        # The axes come from the trial's user attrs; its params show them in optuna-dashboard (trial_params.py).
        axes = dict(trial.user_attrs["axes"])
        cell = suite.cell(axes)
        return cell.cell_id, cell_params(axes, cell.config), cell.config

    return Job(study=study, cell_for=cell_for)


def bracket_study_names(ledger: Ledger, suite: Suite) -> list[str]:
    """The suite's bracketing rounds present in the ledger, in round order."""
    prefix = f"bracket:{suite.name}:"
    return sorted((n for n in ledger.study_names() if n.startswith(prefix)), key=lambda n: int(n[len(prefix):]))


def run_jobs(suite: Suite, study: optuna.Study, ledger: Ledger,
             progress: Progress | None = None) -> Callable[[], list[Job]]:
    """The job list a worker consumes: the matrix, plus (when `suite.bracket`) a round of cells beyond each edge
    lr, queued when every cell so far has finished. Every worker computes the same round from the same ledger, and
    a cell already queued anywhere is not queued again, so each runs once; a new round is a new study, which tells
    the worker loop there is more to do."""
    def jobs() -> list[Job]:
        studies = [study, *(ledger.study(n) for n in bracket_study_names(ledger, suite))]
        if suite.bracket and not any(s.get_trials(deepcopy=False, states=UNFINISHED) for s in studies):
            from normbench.sweep.bracket import bracket_axes

            trials = [t for s in studies for t in s.get_trials(deepcopy=False, states=LIVE)]
            finished = [(t.user_attrs["axes"], t.user_attrs.get("result", {})) for t in trials
                        if t.state == TrialState.COMPLETE]
            present = {t.user_attrs.get("cell_id") for t in trials}
            new = {suite.cell(axes).cell_id: axes for axes in bracket_axes(suite, finished)}
            new = {cid: axes for cid, axes in new.items() if cid not in present}
            if new:
                studies.append(ledger.study(f"bracket:{suite.name}:{len(studies)}"))
                ledger.enqueue(studies[-1], new)
                if progress is not None:
                    note_bracket_round(progress, suite, studies[-1].study_name, new)
        return [run_job(suite, s) for s in studies]

    return jobs


def cell_cost(suite: Suite, axes: dict[str, Any]) -> float:
    """A cell's relative cost for the ETA: depth x epochs."""
    config = suite.cell(axes).config
    return float(config.model.depth * config.train.epochs)


def note_bracket_round(progress: Progress, suite: Suite, study_name: str, cells: dict[str, dict[str, Any]]) -> None:
    """Count a new bracketing round's cells (`{cell_id: axes}`) in the progress line's total and ETA."""
    progress.add({cid: cell_cost(suite, axes) for cid, axes in cells.items()})
    progress.note(f"bracket round {study_name.rsplit(':', 1)[-1]}: {len(cells)} cells beyond the lr grid's edge")


def preflight(suite: Suite, device: str | None) -> str:
    """The device to use, after checking it exists and loading the dataset once: a missing GPU or dataset fails
    here with its message, not in every cell."""
    from normbench.data import build_data

    device = device or suite.device
    resolve_device(device)
    build_data(suite.dataset, batch_size=1, device="cpu", seed=0)
    return device


def run_suite(suite: Suite, out_dir: Path, *, storage: str | None = None, device: str | None = None,
              workers: int | None = None, quiet: bool = False) -> WorkSummary:
    """Train every unfinished cell of the suite, then write the leaderboard."""
    device = preflight(suite, device)
    check_output_folder(out_dir)
    ledger = Ledger(storage, out_dir)
    tracker = Tracker(out_dir, suite.name)
    study = open_run_study(ledger, suite)
    save_suite_copy(suite, out_dir)  # after the recipe check: a refused run changes nothing in the folder
    cells = suite.cells()
    ledger.enqueue(study, {c.cell_id: c.axes for c in cells})
    rounds = bracket_study_names(ledger, suite)  # queued by an earlier run of this suite: counted too
    queued = {c.cell_id: c.axes for c in cells}
    for name in rounds:
        queued.update(queued_cells(ledger, name))
    finished = {cell_id(t.user_attrs["axes"]) for s in [study, *map(ledger.study, rounds)]
                for t in s.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if "axes" in t.user_attrs}
    costs = {cid: cell_cost(suite, axes) for cid, axes in queued.items() if cid not in finished}
    progress = Progress(total=len(queued), done=len(finished), quiet=quiet, costs=costs)
    progress.note(f"suite {suite.name}: {len(queued)} cells ({len(queued) - len(cells)} from bracketing), "
                  f"{len(finished)} already finished; output in {out_dir}")
    summary = work_everywhere(suite, out_dir, jobs=run_jobs(suite, study, ledger, progress),
                              study_names=[study.study_name], ledger=ledger, tracker=tracker, storage=storage,
                              device=device, workers=workers, progress=progress, mode="run")
    finish_suite(suite, out_dir, storage=storage, tracker=tracker, progress=progress, summary=summary)
    return summary


OUTPUT_FILES = ("leaderboard.md", "results.csv", "suite.yaml", "mlflow.db", "ledger.journal",
                "accuracy_vs_depth.png", "accuracy_vs_lr.png")


def check_output_folder(out_dir: Path) -> None:
    """Before training: the output folder can be created and written, and no output file's path is taken by a
    folder. Raises NormbenchError (exit 2) naming the path, so a disk fault costs no training."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"\0" * 4096)
        probe.unlink()
    except OSError as e:
        raise NormbenchError(f"{out_dir}: cannot write the output folder ({e.strerror}); make it writable, free "
                             "space, or pass another --out. Nothing was trained.") from None
    for name in OUTPUT_FILES:
        if (out_dir / name).is_dir():
            raise NormbenchError(f"{out_dir / name}: is a folder, where normbench writes a file; move it away and "
                                 "run again. Nothing was trained.")


def save_suite_copy(suite: Suite, out: Path) -> None:
    """OUT/suite.yaml, read back by `normbench leaderboard OUT`."""
    out.mkdir(parents=True, exist_ok=True)
    if suite.path.resolve() != (out / "suite.yaml").resolve():
        tmp = out / f".suite.yaml.{os.getpid()}"
        shutil.copyfile(suite.path, tmp)
        tmp.replace(out / "suite.yaml")


def work_everywhere(suite: Suite, out_dir: Path, *, jobs: Callable[[], list[Job]], study_names: list[str],
                    ledger: Ledger, tracker: Tracker, storage: str | None, device: str, workers: int | None,
                    progress: Progress, mode: str) -> WorkSummary:
    """Run the studies' cells in `workers` local worker processes (when more than one), then in this process:
    alone that is all the work; after workers it finishes whatever a dead worker left behind (usually nothing)."""
    workers = workers or default_workers(device)
    summary = WorkSummary()
    if workers > 1:
        summary = spawn_workers(suite, out_dir, storage=storage, device=device, workers=workers, progress=progress,
                                study_names=study_names, ledger=ledger, mode=mode)
    summary.add(work(jobs, ledger, tracker, device, progress, suite.name))
    return summary


def finish_suite(suite: Suite, out_dir: Path, *, storage: str | None, tracker: Tracker, progress: Progress,
                 summary: WorkSummary) -> None:
    from normbench.report.leaderboard import write_leaderboard

    write_leaderboard(out_dir, suite=suite, storage=storage, tracker=tracker)
    if summary.bookkeeping():
        progress.note(summary.bookkeeping())
    progress.note(f"leaderboard: {out_dir / 'leaderboard.md'}")


def count_finished(ledger: Ledger, study_names: list[str]) -> int:
    existing = set(ledger.study_names())
    return sum(len(ledger.study(n).get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
               for n in study_names if n in existing)


def queued_cells(ledger: Ledger, study_name: str) -> dict[str, dict[str, Any]]:
    """`{cell_id: axes}` of the study's live cells."""
    return {t.user_attrs["cell_id"]: t.user_attrs["axes"]
            for t in ledger.study(study_name).get_trials(deepcopy=False, states=LIVE) if "axes" in t.user_attrs}


def newly_finished(ledger: Ledger, study_names: list[str], seen: set[tuple[str, int]]) -> list[FrozenTrial]:
    """Finished trials of the studies not in `seen` (`(study, number)` pairs, updated in place)."""
    existing = set(ledger.study_names())
    new = []
    for name in (n for n in study_names if n in existing):
        for t in ledger.study(name).get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            if (name, t.number) not in seen:
                seen.add((name, t.number))
                new.append(t)
    return new


def default_workers(device: str) -> int:
    """One worker per visible GPU on a GPU machine; one on a CPU (which its threads already fill)."""
    if device.startswith("cuda") or device == "auto":
        import torch

        if torch.cuda.is_available() and ":" not in device:
            return torch.cuda.device_count()
    return 1


def spawn_workers(suite: Suite, out_dir: Path, *, storage: str | None, device: str, workers: int,
                  progress: Progress, study_names: list[str], ledger: Ledger, mode: str = "run") -> WorkSummary:
    """Start `workers` local `normbench worker` processes (each on its own GPU when there are GPUs) and wait."""
    import torch

    gpus = torch.cuda.device_count() if device in ("auto", "cuda") and torch.cuda.is_available() else 0
    seen: set[tuple[str, int]] = set()
    counted = {cid for name in bracket_study_names(ledger, suite)  # in the progress total already
               for cid in queued_cells(ledger, name)}

    def watched() -> list[str]:
        """The studies whose finished cells are reported, with the bracketing rounds the workers queue."""
        rounds = bracket_study_names(ledger, suite)
        for name in rounds:
            new = {cid: axes for cid, axes in queued_cells(ledger, name).items() if cid not in counted}
            if new:
                counted.update(new)
                note_bracket_round(progress, suite, name, new)
        return [*study_names, *(n for n in rounds if n not in study_names)]

    newly_finished(ledger, watched(), seen)  # cells finished before: not reported again
    reported = 0

    def report() -> None:
        nonlocal reported
        for t in newly_finished(ledger, watched(), seen):
            progress.record(t.user_attrs.get("cell_id", f"trial {t.number}"), t.user_attrs.get("result"),
                            where=f"  (worker {t.user_attrs.get('worker_pid', '?')})")
            reported += 1

    procs = []
    for i in range(workers):
        env = dict(os.environ)
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(i % gpus)
        elif device == "cpu" or not gpus:  # share the cores instead of oversubscribing them
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
        args = [sys.executable, "-m", "normbench", "worker", str(suite.path), "--out", str(out_dir),
                "--device", device, "--mode", mode, "--quiet", *(["--bracket"] if suite.bracket else [])]
        if storage:
            args += ["--storage", storage]
        procs.append(subprocess.Popen(args, env=env))
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(2.0)
            report()  # each cell's result as a worker finishes it
        report()  # and those finished since the last look
    except KeyboardInterrupt as stop:  # Ctrl-C reaches every worker; SIGTERM (SLURM, Kubernetes) only this process
        deadline = time.monotonic() + (0.0 if isinstance(stop, Terminated) else 5.0)
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()  # each worker gives its cell back on SIGTERM as on Ctrl-C
        for p in procs:
            p.wait()
        raise
    failed = [p.returncode for p in procs if p.returncode]
    if failed:
        progress.note(f"{len(failed)} worker(s) exited with {failed}; their cells went back to the queue")
    return WorkSummary(cells_run=reported, errors=len(failed))
