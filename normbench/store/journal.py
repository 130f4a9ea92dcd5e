"""The journal-file ledger, made safe against a crash mid-write and honest about damage.

Optuna's journal is one JSON record a line, appended under a lock. A process killed mid-write leaves a torn last line;
Optuna skips it when reading, but the next append would glue onto it and make a line that never parses. Here every
append first cuts a torn (or unparseable) last line off, under the journal's own lock, and says so once. Damage
anywhere else stops the run (exit 2) naming the file and line and the fix, `normbench ledger repair OUT`, which keeps
every record before the first bad line and moves the rest to a `.damaged` file beside it. A line that is JSON but no
record this Optuna can replay (`{}`, an op code of a newer Optuna) is refused and repaired the same way, wherever it
is: Optuna would stop on it with a KeyError or an assertion, and cutting it off as torn would hide another writer.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.storages.journal._file import get_lock_file
from optuna.storages.journal._storage import JournalOperation

from normbench.errors import NormbenchError

TAIL_CHUNK = 1 << 16

KNOWN_OPS = frozenset(op.value for op in JournalOperation)
# The fields Optuna's replay reads without a default, per operation (optuna/storages/journal/_storage.py)
_TRIAL, _STUDY = ("worker_id", "trial_id"), ("worker_id", "study_id")
REQUIRED = {
    JournalOperation.CREATE_STUDY: ("worker_id", "study_name", "directions"),
    JournalOperation.DELETE_STUDY: _STUDY,
    JournalOperation.SET_STUDY_USER_ATTR: (*_STUDY, "user_attr"),
    JournalOperation.SET_STUDY_SYSTEM_ATTR: (*_STUDY, "system_attr"),
    JournalOperation.CREATE_TRIAL: (*_STUDY, "datetime_start"),
    JournalOperation.SET_TRIAL_PARAM: (*_TRIAL, "param_name", "param_value_internal", "distribution"),
    JournalOperation.SET_TRIAL_STATE_VALUES: (*_TRIAL, "state", "values"),
    JournalOperation.SET_TRIAL_INTERMEDIATE_VALUE: (*_TRIAL, "step", "intermediate_value"),
    JournalOperation.SET_TRIAL_USER_ATTR: (*_TRIAL, "user_attr"),
    JournalOperation.SET_TRIAL_SYSTEM_ATTR: (*_TRIAL, "system_attr"),
}


class LedgerDamagedError(NormbenchError):
    """A journal line that cannot be replayed (damage before the end, or a record of another Optuna version): names
    the file, the line and how to recover."""


class SafeJournalFileBackend(JournalFileBackend):
    """JournalFileBackend whose appends never glue onto a torn last line."""

    def __init__(self, file_path: str) -> None:
        super().__init__(file_path, lock_obj=JournalFileSymlinkLock(file_path))
        with get_lock_file(self._lock):
            check(Path(file_path))

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        """Optuna's reader, refusing a record it cannot replay by its line (one another process appended while
        this one runs; the file as opened was checked whole) instead of failing inside Optuna."""
        for number, record in enumerate(super().read_logs(log_number_from), start=log_number_from + 1):
            if not replayable(record):
                raise _damaged(Path(self._file_path), number, json.dumps(record).encode())
            yield record

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        with get_lock_file(self._lock):
            with open(self._file_path, "rb+") as f:
                cut_torn_tail(f, Path(self._file_path))
            what = "\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n"
            with open(self._file_path, "ab") as f:
                f.write(what.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())


def check(path: Path) -> None:
    """Cut a torn last record (with a warning); raise LedgerDamagedError for a bad line anywhere else."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        cut_torn_tail(f, path)
    bad = _first_bad(path)
    if bad is not None:
        raise _damaged(path, *bad)


def _damaged(path: Path, number: int, line: bytes) -> LedgerDamagedError:
    return LedgerDamagedError(
        f"{path}: line {number} is {_what_is_wrong(line)}; the {number - 1} records before it are intact.\n"
        f"Run `normbench ledger repair {path.parent}` to keep those {number - 1} records (the rest is moved to "
        f"{path.name}.damaged; their cells run again), or restore the file from a backup.")


def _what_is_wrong(line: bytes) -> str:
    if not _parses(line):
        return "not a ledger record (a damaged file)"
    return (f"JSON but not a ledger record Optuna {optuna.__version__} can read (written by another Optuna "
            "version, or damaged)")


def cut_torn_tail(f: Any, path: Path) -> None:
    """Truncate `f` (opened rb+) to its last complete, parseable line, saving what was cut beside it."""
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return
    start = _last_line_start(f, end)
    f.seek(start)
    last = f.read(end - start)
    if last.endswith(b"\n") and _parses(last):
        return
    _save_damaged(path, last)
    f.truncate(start)
    f.flush()
    os.fsync(f.fileno())
    print(f"normbench: warning: {path}: cut off a torn last record ({len(last)} bytes, a crash mid-write; saved to "
          f"{path.name}.damaged); every complete record is kept", file=sys.stderr, flush=True)


def first_bad_line(path: Path) -> tuple[int, int] | None:
    """(1-based line number, records before it) of the first line that is no record Optuna can replay, or None."""
    bad = _first_bad(path)
    return None if bad is None else (bad[0], bad[0] - 1)


def _first_bad(path: Path) -> tuple[int, bytes] | None:
    """(1-based line number, the line) of the first line that is no record Optuna can replay, or None."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.endswith(b"\n") or not is_record(line):
                return number, line
    return None


def repair(path: Path) -> tuple[int, int]:
    """Keep the records before the first bad line; move the rest to `<path>.damaged`. Returns (kept, moved) lines."""
    with get_lock_file(JournalFileSymlinkLock(str(path))):
        bad = first_bad_line(path)
        if bad is None:
            return sum(1 for _ in open(path, "rb")), 0
        number, kept = bad
        with open(path, "rb+") as f:
            offset = sum(len(line) for _, line in zip(range(kept), f, strict=False))
            f.seek(offset)
            rest = f.read()
            _save_damaged(path, rest)
            f.truncate(offset)
            f.flush()
            os.fsync(f.fileno())
        return kept, rest.count(b"\n") + (not rest.endswith(b"\n"))


def _last_line_start(f: Any, end: int) -> int:
    """Offset where the last line (the bytes after the second-to-last newline of a newline-ended file) starts."""
    pos = end
    skip_final_newline = True
    while pos > 0:
        step = min(TAIL_CHUNK, pos)
        pos -= step
        f.seek(pos)
        chunk = f.read(step)
        if skip_final_newline and pos + step == end and chunk.endswith(b"\n"):
            chunk = chunk[:-1]
        skip_final_newline = False
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return pos + cut + 1
    return 0


def is_record(line: bytes) -> bool:
    """A JSON line Optuna can replay (see `replayable`)."""
    try:
        return replayable(json.loads(line))
    except ValueError:
        return False


def replayable(record: Any) -> bool:
    """A JSON object with an operation this Optuna knows and the fields its replay reads."""
    op = record.get("op_code") if isinstance(record, dict) else None
    if type(op) is not int or op not in KNOWN_OPS:
        return False
    return all(key in record for key in REQUIRED.get(JournalOperation(op), ()))


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _save_damaged(path: Path, data: bytes) -> None:
    with open(f"{path}.damaged", "ab") as f:
        f.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} cut from {path.name}\n".encode() + data +
                (b"" if data.endswith(b"\n") else b"\n"))
