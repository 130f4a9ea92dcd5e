"""The CPU's cores shared among the normbench processes that train on it.

torch gives every process one thread per core. Two `normbench run`s on one 2-core machine then ran 4.5-6.5x slower
per epoch than with one thread each (the sweeps' ledgers, 2026-11-26): each run's OpenMP threads spin waiting for
cores the other run holds. So each worker training on the CPU signs a file in a machine-wide folder and holds a lock
on it while it lives; before each cell and after each epoch it takes cores // (live signers) threads (a run
started mid-cell would otherwise leave this one's long cell on too many threads). A dead worker's file is unlocked,
so it stops counting at once. OMP_NUM_THREADS, when set, wins (`run --workers N` sets it for its own workers).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path

import torch

FOLDER = Path(tempfile.gettempdir()) / "normbench-cpu-trainers"


def cores() -> int:
    """The cores this process may run on (its affinity mask, as taskset or a container's cpuset leave it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class CpuShare:
    """This process's signature in `folder`; `apply()` (before each cell, after each epoch) sets torch's threads to
    its share."""

    def __init__(self, folder: Path = FOLDER) -> None:
        self.folder = folder
        self._threads_before = torch.get_num_threads()  # given back at close: `run` called from Python leaves none
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)  # one folder for every user of the machine, like /tmp itself
        self.path = folder / str(os.getpid())
        while True:  # another process's `live` may remove the file between its creation and the lock: sign again
            self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    return
            os.close(self._fd)

    @classmethod
    def sign_in(cls, folder: Path | None = None) -> CpuShare | None:
        """A share, or None where the folder cannot be written (a read-only /tmp): cells then keep torch's threads."""
        try:
            return cls(folder or FOLDER)
        except OSError:
            return None

    def live(self) -> int:
        """Processes signed in and alive, this one included; a file nobody holds is a dead worker's: removed."""
        count = 1
        for path in self.folder.iterdir():
            if path == self.path:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # removed meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                count += 1  # its owner holds it: alive
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            finally:
                os.close(fd)
        return count

    def threads(self) -> int:
        return max(1, cores() // self.live())

    def apply(self) -> int:
        """Set torch's intra-op threads to this process's share (unless OMP_NUM_THREADS says otherwise); returns
        the number of threads cells will use."""
        if os.environ.get("OMP_NUM_THREADS"):
            return torch.get_num_threads()
        share = self.threads()
        if torch.get_num_threads() != share:
            torch.set_num_threads(share)
        return share

    def close(self) -> None:
        if torch.get_num_threads() != self._threads_before:
            torch.set_num_threads(self._threads_before)
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            os.close(self._fd)
