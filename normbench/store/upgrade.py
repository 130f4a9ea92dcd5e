"""Bring a ledger journal written before version 5 (store/migrations.py) up to it, so optuna-dashboard draws every
finished cell's val curve and sorts by its scores: `normbench ledger upgrade OUT`.

Optuna cannot change a finished trial, so the journal is rebuilt with Optuna's public API: every study again, in
order, with its directions, user and system attrs and a named objective; every trial again in the order it was
created (its number, and its id, stay), with the intermediate values and user attrs migrations.py says it lacks.
The new file is written beside the old one, fsynced and renamed over it: a crash leaves the old file whole. It runs
under the journal's lock (no append lands between the read and the rename) and is refused while the ledger is in
use (a RUNNING trial, a live worker). A current journal is left untouched, so a second call changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from normbench.contracts.names import OutputFolder
from normbench.errors import NormbenchError
from normbench.store.journal import SafeJournalFileBackend, first_bad_line
from normbench.store.locks import JournalLock, holder_dead
from normbench.store.migrations import OBJECTIVE_NAME, version5_additions

COMMAND = "normbench ledger upgrade"


@dataclass(frozen=True)
class UpgradeSummary:
    path: Path
    studies: int
    trials: int
    upgraded: int  # trials given intermediate values or numeric scores
    values_added: int
    names_added: int  # studies given an objective name
    size_before: int
    size_after: int

    @property
    def changed(self) -> bool:
        return bool(self.upgraded or self.names_added)

    def line(self) -> str:
        if not self.changed:
            return f"{self.path}: already current ({self.trials} trials in {self.studies} studies); nothing changed"
        return (f"{self.path}: upgraded {self.upgraded} of {self.trials} trials in {self.studies} studies "
                f"({self.values_added} intermediate values added, {self.names_added} objectives named); "
                f"{self.size_before} -> {self.size_after} bytes")


def needs_upgrade(path: str | Path) -> bool:
    """Whether a finished trial lacks its epochs' intermediate values or numeric scores, or a study its objective's
    name (read only; a 1 MB journal loads in a tenth of a second)."""
    storage = JournalStorage(SafeJournalFileBackend(str(path)))
    for study in storage.get_all_studies():
        if _lacks_name(storage, study.study_name):
            return True
        if any(values or attrs for values, attrs in map(version5_additions, _trials(storage, study))):
            return True
    return False


def upgrade_journal(path: str | Path) -> UpgradeSummary:
    """Rewrite the journal at `path` in the version-5 shape (see the module docstring); NormbenchError when it is
    damaged or in use, naming the fix."""
    path = Path(path)
    if not path.is_file():
        raise NormbenchError(f"{path}: no such ledger journal; pass OUT/{OutputFolder.LEDGER}")
    if (bad := first_bad_line(path)) is not None:
        raise NormbenchError(f"{path}: line {bad[0]} is damaged; run `normbench ledger repair {path.parent}` first, "
                             f"then `{COMMAND} {path}` again")
    lock = JournalLock(path)
    lock.acquire()  # writers wait: nothing is appended between the read below and the rename
    try:
        return _upgrade_locked(path)
    finally:
        lock.release()


def _upgrade_locked(path: Path) -> UpgradeSummary:
    old = JournalStorage(SafeJournalFileBackend(str(path)))
    _refuse_if_in_use(path, old)
    studies = old.get_all_studies()
    trials = sorted(((old.get_trial_id_from_study_id_trial_number(_id(old, s), t.number), s.study_name, t)
                     for s in studies for t in _trials(old, s)), key=lambda item: item[0])
    additions = {(name, t.number): version5_additions(t) for _, name, t in trials}
    unnamed = [s.study_name for s in studies if _lacks_name(old, s.study_name)]
    size = path.stat().st_size
    upgraded = [key for key, (values, attrs) in additions.items() if values or attrs]
    summary = UpgradeSummary(path, len(studies), len(trials), len(upgraded),
                             sum(len(additions[key][0]) for key in upgraded), len(unnamed), size, size)
    if not summary.changed:
        return summary
    tmp = path.with_name(f".{path.name}.upgrade-{os.getpid()}")
    try:
        new = JournalStorage(JournalFileBackend(str(tmp)))
        copies = {s.study_name: _copy_study(new, s) for s in studies}
        for _, name, t in trials:
            copies[name].add_trial(_with(t, *additions[(name, t.number)]))
        _check_numbers(old, new, studies)
        _keep_identity(path, tmp)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, Path(f"{tmp}.lock")):
            leftover.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return UpgradeSummary(path, summary.studies, summary.trials, summary.upgraded, summary.values_added,
                          summary.names_added, size, path.stat().st_size)


def _refuse_if_in_use(path: Path, storage: JournalStorage) -> None:
    """A RUNNING trial or a live worker's OS lock means a run uses the ledger: its in-memory view of the journal
    would no longer match the rewritten file."""
    running = [f"`{s.study_name}` trial {t.number}" for s in storage.get_all_studies()
               for t in _trials(storage, s) if t.state == TrialState.RUNNING]
    locks = path.parent / OutputFolder.LOCKS
    live = [p.name for p in sorted(locks.glob("worker-*.lock")) if not holder_dead(p)] if locks.is_dir() else []
    if running or live:
        what = f"{len(running)} trial(s) RUNNING ({running[0]})" if running else f"a live worker ({live[0]})"
        raise NormbenchError(f"{path}: in use, {what}; let the run finish or stop it (a cell left RUNNING by a "
                             f"killed run is given back when `normbench run` resumes the folder), then run "
                             f"`{COMMAND} {path}` again")


def _copy_study(new: JournalStorage, old: Any) -> optuna.Study:
    study = optuna.create_study(storage=new, study_name=old.study_name, directions=old.directions)
    for key, value in old.user_attrs.items():
        study.set_user_attr(key, value)
    study_id = new.get_study_id_from_name(old.study_name)
    for key, value in old.system_attrs.items():  # the objective's name lives here, among Optuna's own
        new.set_study_system_attr(study_id, key, value)
    if study.metric_names is None:
        with warnings.catch_warnings():  # "set_metric_names is experimental": stable since Optuna 3.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([OBJECTIVE_NAME] * len(old.directions))
    return study


def _with(t: FrozenTrial, values: dict[int, float], attrs: dict[str, float]) -> FrozenTrial:
    """`t` with intermediate values and user attrs added (a new FrozenTrial: its fields have no public setters)."""
    return FrozenTrial(number=t.number, state=t.state, value=None, values=t.values, datetime_start=t.datetime_start,
                       datetime_complete=t.datetime_complete, params=t.params, distributions=t.distributions,
                       user_attrs={**t.user_attrs, **attrs}, system_attrs=t.system_attrs,
                       intermediate_values={**t.intermediate_values, **values},
                       trial_id=-1)  # add_trial gives it the next id


def _check_numbers(old: JournalStorage, new: JournalStorage, studies: list[Any]) -> None:
    """Every trial kept its number (MLflow's runs and results.csv name trials by it)."""
    for s in studies:
        before = [t.number for t in _trials(old, s)]
        after = [t.number for t in new.get_all_trials(new.get_study_id_from_name(s.study_name), deepcopy=False)]
        if before != after:
            raise RuntimeError(f"upgrade: `{s.study_name}` trial numbers changed; the journal was left as it was")


def _keep_identity(path: Path, tmp: Path) -> None:
    """Give the new file the old writer's id: the first record's id names the ledger (store/journal.py
    `ledger_identity`, MLflow's parent run per ledger), so the upgraded journal stays the same ledger."""
    def writer(p: Path) -> bytes:
        with open(p, "rb") as f:
            line = f.readline()
        return line[line.index(b'"worker_id":'):].split(b",", 1)[0]

    was, now = writer(path), writer(tmp)
    tmp.write_bytes(tmp.read_bytes().replace(now, was))


def _id(storage: JournalStorage, study: Any) -> int:
    return storage.get_study_id_from_name(study.study_name)


def _trials(storage: JournalStorage, study: Any) -> list[FrozenTrial]:
    return storage.get_all_trials(_id(storage, study), deepcopy=False)


def _lacks_name(storage: JournalStorage, name: str) -> bool:
    return optuna.load_study(study_name=name, storage=storage).metric_names is None


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def main(paths: list[str]) -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # not a line per study it copies
    if not paths:
        print(f"usage: {COMMAND} OUT/{OutputFolder.LEDGER} [...]", file=sys.stderr)
        return 2
    for p in paths:
        try:
            print(upgrade_journal(p).line())
        except NormbenchError as e:
            print(f"normbench: {e}", file=sys.stderr)
            return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
