"""OS file locks (fcntl.flock): released by the kernel when their process dies, whatever its host name or pid.

`folder_lock(out)` serializes the creation of an output folder's stores (MLflow's SQLite schema) across processes.
`LifeLock` is held by a worker process for as long as it lives: a cell claimed on a journal file names its lock
file, and a lock that another process can take means its holder is dead, even if its pid was reused (PID 1 after a
container restart) or it ran under another host name (a new container, a folder shared over NFS).
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from normbench.spec.names import OutputFolder

LOCKS_DIR = OutputFolder.LOCKS


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
