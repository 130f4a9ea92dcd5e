"""OS file locks (fcntl.flock): released by the kernel when their process dies, whatever its host name or pid.

`folder_lock(out)` serializes creating an output folder's stores (MLflow's SQLite schema). `LifeLock` is held by a
worker for life and named by its journal claims: a lock another process can take means a dead holder, even with a
reused pid (PID 1 in a restarted container) or another host name. `JournalLock` speaks Optuna's symlink protocol
(`ledger.journal.lock`, taken over after NORMBENCH_JOURNAL_LOCK_GRACE s with no journal change) so any Optuna writer
interoperates, but says what it waits for, never removes a lock it does not hold, and counts takeovers (`lost`).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from normbench import settings
from normbench.contracts.names import OutputFolder

LOCKS_DIR = OutputFolder.LOCKS
SAY_AFTER = 5.0  # a write takes milliseconds: a wait this long is worth a line


@contextmanager
def folder_lock(folder: Path, name: str = "create") -> Iterator[None]:
    """Hold `<folder>/.locks/<name>.lock` exclusively (blocking) for the block."""
    path = Path(folder) / LOCKS_DIR / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class LifeLock:
    """A lock file in `<folder>/.locks/` held by this process until it exits (or `release`)."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCKS_DIR / f"worker-{uuid.uuid4().hex[:12]}.lock"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
        os.close(self._fd)


def holder_dead(path: str | Path) -> bool:
    """True when the lock file's holder is gone: the file is missing, or its lock can be taken (then it is removed)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # cannot tell (permissions): assume alive
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    try:
        Path(path).unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True


class JournalLock:
    """The write lock of the journal at `journal` (module docstring); Optuna takes any object with acquire/release."""

    def __init__(self, journal: str | Path) -> None:
        self.journal, self.path = str(journal), f"{journal}.lock"
        self.grace = journal_lock_grace()
        self.lost = 0  # how many times another process took this lock over while this one held it
        self._held: int | None = None  # the inode of the link this process made

    def acquire(self) -> bool:
        started = changed = time.monotonic()
        said, mtime, sleep = False, None, 0.001
        while True:
            try:
                os.symlink(self.journal, self.path)
                self._held = os.lstat(self.path).st_ino
                return True
            except FileExistsError:
                pass
            try:
                current = _mtime(self.path)
            except FileNotFoundError:
                continue  # released meanwhile: try again at once
            now = time.monotonic()
            if current != mtime:
                mtime, changed = current, now
            if not said and now - started > SAY_AFTER:
                said = True
                _say(f"waiting for the ledger's lock {self.path}: another process is writing {self.journal}, or one "
                     f"was killed while writing it; it is taken over after {self.grace:.0f} s without a change. If "
                     f"no normbench process uses this folder, remove it now: rm {shlex.quote(self.path)}")
            if now - changed > self.grace:
                if self._take_over():
                    _say(f"took over the ledger's lock {self.path}: {self.journal} unchanged for {self.grace:.0f} s "
                         "(its holder was killed while writing, or is stalled)")
                sleep = 0.001
                continue
            time.sleep(sleep)
            sleep = min(sleep * 2, 1.0)

    def _take_over(self) -> bool:
        try:  # renamed first, as Optuna does: of two processes removing it at once, one succeeds
            aside = f"{self.path}.{uuid.uuid4().hex}.rename"
            os.rename(self.path, aside)
            os.unlink(aside)
        except OSError:
            return False
        return True

    def release(self) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        try:
            ours = os.lstat(self.path).st_ino == held
        except FileNotFoundError:
            ours = False
        if not (ours and self._take_over()):
            self.lost += 1  # another process took it over while this one held it (stalled past the grace)


def journal_lock_grace() -> float:
    """NORMBENCH_JOURNAL_LOCK_GRACE (default 30 s, Optuna's): a lock this long with no journal change is taken over."""
    return settings.current().journal_lock_grace


def _mtime(link: str) -> float:
    """The journal's mtime via the lock's link (it changes while the holder writes), or the link's own if dangling."""
    try:
        return os.stat(link).st_mtime
    except FileNotFoundError:
        return os.lstat(link).st_mtime


def _say(line: str) -> None:
    print(f"normbench: {line}", file=sys.stderr, flush=True)
