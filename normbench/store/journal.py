"""The journal-file ledger, made safe against a crash mid-write and honest about damage.

A crash mid-append leaves a torn last line the next append would glue onto, so each append cuts it first (warning
once); opening only reads, and a run cuts it past its refusals (`repair_tail`). Any other bad line, even JSON this
Optuna cannot replay (`{}`, a newer op code; cutting it would hide another writer), stops the run (exit 2) until
`normbench ledger repair OUT` moves it and the rest to `.damaged`. A refused write raises LedgerWriteError (a full
disk frees store/reserve.py's reserve); a lock taken over mid-write stops the run next turn (LedgerLockLostError).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend

from normbench.errors import NormbenchError
from normbench.store import reserve
from normbench.store.locks import JournalLock
from normbench.store.optuna_api import JOURNAL_OPS, SET_STATE, STATE_TIMES

TAIL_CHUNK = 1 << 16



class LedgerDamagedError(NormbenchError):
    """A journal line that cannot be replayed (damage, or another Optuna's record): names the file, line and fix."""


class LedgerWriteError(NormbenchError):
    """The disk refused a write to the journal (full, read-only, an I/O error): names the file and the fix."""


class LedgerLockLostError(NormbenchError):
    """Another process took the journal's lock over while this one held it: the run stops at its next turn."""


@contextlib.contextmanager
def held(lock: JournalLock) -> Iterator[None]:
    """The journal's lock, held for the block."""
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


class SafeJournalFileBackend(JournalFileBackend):
    """JournalFileBackend whose appends never glue onto a torn last line (see the module docstring)."""

    def __init__(self, file_path: str) -> None:
        self.lock, self.path = JournalLock(file_path), Path(file_path)
        super().__init__(file_path, lock_obj=self.lock)
        check(self.path)

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        """Optuna's reader, refusing by line a record it cannot replay (appended since the whole-file check at open)."""
        for number, record in enumerate(super().read_logs(log_number_from), start=log_number_from + 1):
            if not replayable(record):
                raise _damaged(self.path, number, json.dumps(record).encode())
            yield record

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        lost = self.lock.lost
        try:
            with held(self.lock):
                with open(self.path, "rb+") as f:
                    cut_torn_tail(f, self.path)
                what = "\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n"
                _append(self.path, what.encode("utf-8"))
        except OSError as e:
            raise write_error(self.path, e) from None
        if self.lock.lost > lost:  # another process wrote meanwhile: stop at once if the two writes tangled
            check(self.path)

    def cut_torn_tail(self) -> None:
        """Cut a torn last record now, with its warning (an append does it anyway)."""
        try:
            with held(self.lock), open(self.path, "rb+") as f:
                cut_torn_tail(f, self.path)
        except OSError as e:
            raise write_error(self.path, e) from None


def _append(path: str, data: bytes) -> None:
    """Append `data` whole and fsync, or undo it: a full disk's partial write is not left as a torn tail."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)


def repair_tail(journal: SafeJournalFileBackend | None) -> None:
    """Cut a torn last record once past a run's refusals (see the module docstring); nothing for a database (None)."""
    if journal is not None:
        journal.cut_torn_tail()


def ledger_identity(journal: SafeJournalFileBackend | None) -> str:
    """The first record's storage id (random per process: a new journal at the path is another ledger), or ''."""
    if journal is None:
        return ""
    try:
        with open(journal.path, "rb") as f:
            first = json.loads(f.readline())
    except (OSError, ValueError):
        return ""
    return str(first.get("worker_id", ""))[:36] if isinstance(first, dict) else ""  # "<uuid4>-<thread id>"


def write_error(path: Path, e: OSError) -> LedgerWriteError:
    """The message for a write the disk refused; a full disk frees the folder's reserve for the way out."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        reserve.free(path.parent)
        fix = "the disk is full: free space"
    elif e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "make the folder writable"
    else:
        fix = "check the disk"
    return LedgerWriteError(f"{path}: cannot write the ledger ({e.strerror or e}); {fix}, then run the same command "
                            "to resume (finished cells are kept; the cell in flight runs again)")


def lock_lost(storage: Any) -> LedgerLockLostError | None:
    """The error to stop with when another process took `storage`'s journal lock over while this one held it."""
    backend = getattr(storage, "_backend", None)
    if not isinstance(backend, SafeJournalFileBackend) or not backend.lock.lost:
        return None
    return LedgerLockLostError(
        f"{backend.lock.path}: another process took the ledger's lock over while this one held it (this one was "
        f"stalled over {backend.lock.grace:.0f} s inside a write: a slow or hung disk, or a stopped process); this run "
        f"stops here so that two processes never write {Path(backend.lock.journal).name} at once. Every finished "
        "cell is recorded; run the same command to resume.")


def check(path: Path) -> None:
    """Raise LedgerDamagedError for any bad line but a torn last one (Optuna skips it; the next append cuts it)."""
    if not path.exists():
        return
    bad = _first_bad(path, torn_tail=True)
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
    if not _torn(last):
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


def _first_bad(path: Path, torn_tail: bool = False) -> tuple[int, bytes] | None:
    """Like `first_bad_line`, but (number, the line itself); with `torn_tail`, a torn last line does not count."""
    with open(path, "rb") as f:
        lines = enumerate(f, start=1)
        for number, line in lines:
            if not line.endswith(b"\n") or not is_record(line):
                if torn_tail and _torn(line) and next(lines, None) is None:
                    return None
                return number, line
    return None


def _torn(line: bytes) -> bool:
    """A last line a crash mid-write leaves: unfinished, or not even JSON."""
    return not (line.endswith(b"\n") and _parses(line))


def repair(path: Path) -> tuple[int, int]:
    """Keep the records before the first bad line; move the rest to `<path>.damaged`. Returns (kept, moved) lines."""
    with held(JournalLock(path)):
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
    if type(op) is not int or op not in JOURNAL_OPS:
        return False
    if op == SET_STATE and any(key not in record for key, states in STATE_TIMES.items()
                               if record.get("state") in states):
        return False
    return all(key in record for key in JOURNAL_OPS[op][1])


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _save_damaged(path: Path, data: bytes) -> None:
    with open(f"{path}.damaged", "ab") as f:
        f.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} cut from {path.name}\n".encode() + data +
                (b"" if data.endswith(b"\n") else b"\n"))
