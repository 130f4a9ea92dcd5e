"""`normbench sync`: bring an MLflow store up to date from a ledger, the truth (MLflow is a view of it). One experiment
per suite, a `leaderboard` parent run with the folder's leaderboard files, a nested run per finished trial (layout:
run_record.py). One search per experiment finds existing runs, so syncing is idempotent: complete runs are left alone,
runs cut short are completed in place, older layouts replaced. Deleting the store and syncing again rebuilds it whole.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.names import WEIGHTS_ATTR, OutputFolder, study_suite
from normbench.errors import NormbenchError
from normbench.store.journal import ledger_identity
from normbench.store.ledger import Ledger
from normbench.store.migrations import trial_axes
from normbench.store.retry import redact
from normbench.tracking import mlflow_store
from normbench.tracking.run_record import LAYOUT, LAYOUT_TAG, STATE_TAG, TrialRun, kind_and_role, trial_run
from normbench.tracking.selected_lr import AT_SELECTED_TAG, at_selected_lr

SYNCED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
RUN_STATUS = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "FINISHED", TrialState.FAIL: "FAILED"}


@dataclass
class SyncSummary:
    uri: str
    added: int = 0      # runs created from the ledger
    completed: int = 0  # runs that existed (logged live) and lacked something
    present: int = 0    # runs already complete
    replaced: int = 0   # runs of an older layout or of a ledger the folder no longer has, deleted
    artifacts: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        replaced = f", {self.replaced} replaced" if self.replaced else ""
        return (f"MLflow {redact(self.uri)}: {self.added} runs added, {self.completed} completed, {self.present} "
                f"already there{replaced}; {self.artifacts} leaderboard files ({self.seconds:.1f} s)")


class RecipeParams:
    """The folder's suite, from suite.yaml, for the runs' recipes as the live runs log them (run_record.trial_run)."""

    def __init__(self, folder: OutputFolder) -> None:
        self.folder = folder
        name = folder.saved_suite().get("name")
        self.suite_name = str(name) if name else None

    @cached_property
    def suite(self) -> Any:
        from normbench.contracts.suite import load_suite

        try:
            return load_suite(self.folder.suite) if self.suite_name else None
        except Exception:  # a suite file this normbench no longer reads: the axes still say what the cell was
            return None


def sync(out_dir: Path, storage: str | None = None, tracking_uri: str | None = None) -> SyncSummary:
    """Sync `out_dir`'s ledger (or `storage`) into MLflow; no ledger or an unwritable store: NormbenchError (exit 2)."""
    started = time.perf_counter()
    folder = OutputFolder(out_dir)
    if storage is None and not folder.ledger.exists():  # opening it would leave an empty ledger.journal behind
        raise NormbenchError(f"{folder.path}: no ledger here ({folder.LEDGER}); pass a suite's output folder "
                             "(`normbench run SUITE.yaml --out FOLDER` makes one), and --storage URL if it ran on a "
                             "shared database")
    ledger = Ledger(storage, folder.path)
    uri = mlflow_store.tracking_uri(folder.path, tracking_uri)
    summary = SyncSummary(uri)
    recipes = RecipeParams(folder)
    studies = suite_studies(ledger.study_names(), recipes.suite_name)
    try:
        client = mlflow_store.open_client(uri, folder.path)
        for suite, names in studies.items():
            _sync_suite(client, uri, ledger, recipes, suite, names, summary)
    except (NormbenchError, KeyboardInterrupt):
        raise
    except Exception as e:  # MLflow's, SQLAlchemy's and requests' errors all mean: this store cannot be written
        raise NormbenchError(f"cannot bring the MLflow store {redact(uri)} up to date "
                             f"({mlflow_store.describe_error(e)}); "
                             "check the URI (--tracking-uri, MLFLOW_TRACKING_URI) and that its server is up. The "
                             "ledger is unchanged: sync again once it is.") from None
    summary.seconds = time.perf_counter() - started
    return summary


def suite_studies(names: list[str], only: str | None = None) -> dict[str, list[str]]:
    """The ledger's studies by suite (`kind:<suite>[:...]`); only suite `only`'s when the ledger has it."""
    by_suite: dict[str, list[str]] = {}
    for name in sorted(names):
        if kind_and_role(name)[0] and ":" in name:
            by_suite.setdefault(study_suite(name), []).append(name)
    return {only: by_suite[only]} if only in by_suite else by_suite


def _sync_suite(client: Any, uri: str, ledger: Ledger, recipes: RecipeParams, suite: str, names: list[str],
                summary: SyncSummary) -> None:
    folder = recipes.folder
    experiment = mlflow_store.experiment_id(client, suite, uri, folder.path)
    studies = {name: ledger.study(name) for name in names}
    recipe = next((s.user_attrs["recipe"] for s in studies.values() if "recipe" in s.user_attrs), "")
    parent = mlflow_store.parent_run(client, experiment, {"recipe": recipe, "ledger": ledger_identity(ledger.journal)})
    existing: dict[tuple[str, int], Any] = {}
    own = mlflow_store.own_store(uri, folder.path)  # nothing but this folder's runs belongs there
    for run in _all_runs(client, experiment):  # the one search
        tags, key = run.data.tags, (run.data.tags.get("study"), run.data.tags.get("trial", ""))
        mine = tags.get("mlflow.parentRunId") == parent
        if mine and key[1].isdigit() and tags.get(LAYOUT_TAG) == LAYOUT:
            if (twin := existing.get((key[0], int(key[1])))) is not None:  # two syncs raced to create it: keep one,
                keep, drop = sorted((twin, run), key=lambda r: STATE_TAG not in r.data.tags)  # a complete one
                client.delete_run(drop.info.run_id)
                summary.replaced += 1
                run = keep
            existing[(key[0], int(key[1]))] = run
        elif run.info.run_id != parent and ("study" in tags and (mine or own)
                                            or own and tags.get("kind") == mlflow_store.PARENT_RUN):
            client.delete_run(run.info.run_id)  # an older layout; in the folder's own store, a replaced ledger's too
            summary.replaced += 1
    trials = [(name, trial) for name, study in studies.items() for trial in ledger.trials(study, SYNCED)]
    selected = at_selected_lr(((name, t.number), name, kind_and_role(name)[1], trial_axes(t),
                               t.user_attrs.get("result") if t.state != TrialState.FAIL else None)
                              for name, t in trials)
    for name, trial in progress_bar(trials, suite):
        run = existing.get((name, trial.number))
        at_selected = selected.get((name, trial.number))
        # a FAIL gets a run if it trained or crashed, not a bookkeeping one (duplicate claim, cell failed for good)
        if run is None and trial.state == TrialState.FAIL and not trial.intermediate_values \
                and "error" not in trial.user_attrs:
            continue
        if run is not None and run.data.tags.get(STATE_TAG) == trial.state.name \
                and run.info.status == RUN_STATUS[trial.state]:
            summary.present += 1
            if at_selected is not None and run.data.tags.get(AT_SELECTED_TAG) != at_selected:  # a row's lr moved
                client.set_tag(run.info.run_id, AT_SELECTED_TAG, at_selected)
            continue
        content = synced_run(name, trial, recipes)
        if at_selected is not None:
            content.tags[AT_SELECTED_TAG] = at_selected
        if run is None:
            run_id = client.create_run(experiment, start_time=content.start, run_name=content.name,
                                       tags={**content.tags, "mlflow.parentRunId": parent}).info.run_id
            mlflow_store.log_batches(client, run_id, content.params, content.points)
            client.set_terminated(run_id, RUN_STATUS[trial.state], end_time=content.end)
            summary.added += 1
        else:
            run_id = run.info.run_id
            _complete(client, run, content, RUN_STATUS[trial.state])
            summary.completed += 1
        _attach_weights(client, run_id, folder, trial)
    files = sorted({p for pattern in mlflow_store.ARTIFACTS for p in folder.path.glob(pattern) if p.is_file()})
    for path in files:  # logged again each time: a regenerated leaderboard replaces them
        client.log_artifact(parent, str(path))
    summary.artifacts = len(files)


def progress_bar(trials: list[Any], suite: str) -> Iterable[Any]:
    """tqdm's bar over a suite's trials on a terminal (a published folder takes 14-50 s); nothing when stderr is no
    terminal (tests, logs, pipes), where the summary line alone reports."""
    from tqdm import tqdm

    return tqdm(trials, desc=f"MLflow sync {suite}", unit="run", disable=None, leave=False, dynamic_ncols=True)


def _all_runs(client: Any, experiment: str) -> Iterator[Any]:
    token = None
    while True:
        page = client.search_runs([experiment], max_results=50_000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def synced_run(study: str, trial: FrozenTrial, recipes: RecipeParams) -> TrialRun:
    """A finished trial of `study` as its run (run_record.trial_run, as live logging writes it), marked as the
    ledger's record of it (`ledger_state`)."""
    run = trial_run(study, trial, recipes.suite)
    run.tags[STATE_TAG] = trial.state.name
    return run


def _attach_weights(client: Any, run_id: str, folder: OutputFolder, trial: FrozenTrial) -> None:
    """The cell's kept weights (`train.keep_weights: final`; the trial's `weights` attr under the folder's checkpoints)
    as the run's artifact, if here and missing. Weights under another `--checkpoint-dir` stay there."""
    name = trial.user_attrs.get(WEIGHTS_ATTR)
    path = folder.checkpoints / name if isinstance(name, str) else None
    if path is not None and path.is_file() and path.name not in {a.path for a in client.list_artifacts(run_id)}:
        client.log_artifact(run_id, str(path))


def _complete(client: Any, run: Any, content: TrialRun, status: str) -> None:
    """Add what a live run lacks: new params (MLflow refuses changes), missing metric steps, tags, final status."""
    run_id, data = run.info.run_id, run.data
    have = {key: {m.step for m in client.get_metric_history(run_id, key)}
            for key in {p[0] for p in content.points} & set(data.metrics)}
    mlflow_store.log_batches(client, run_id, {k: v for k, v in content.params.items() if k not in data.params},
                             [p for p in content.points if p[3] not in have.get(p[0], ())],
                             {k: v for k, v in content.tags.items() if k != STATE_TAG})
    mlflow_store.log_batches(client, run_id, tags={STATE_TAG: content.tags[STATE_TAG]})  # last: the run is complete
    client.set_terminated(run_id, status, end_time=content.end)
