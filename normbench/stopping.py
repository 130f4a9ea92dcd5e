"""SIGTERM as a request, honoured at safe points.

A scheduler's SIGTERM (SLURM, Kubernetes, `kill`) used to raise an exception wherever the main thread happened to
be, inside SQLAlchemy's weakref callbacks or a half-written ledger record included. Now the handler only records
the request; the code checks it where stopping is clean (between training batches, between cells, in the waits of
the polling loops) and raises `Terminated` there, which gives the cell in flight back like Ctrl-C does.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from normbench.errors import Terminated

# The exit code of every interrupted run, Ctrl-C or SIGTERM alike (docs/faults.md): both give the cell in flight back
# and print how to resume, so a script or scheduler tests one value. 143 is 128 + SIGTERM, what a scheduler expects.
INTERRUPTED = 143

_requested = threading.Event()


def install() -> Any:
    """Route SIGTERM to the flag; returns the previous handler (None off the main thread, where Python cannot set
    one: there the caller's own handling stays)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _requested.clear()
    return signal.signal(signal.SIGTERM, lambda signum, frame: _requested.set())


def uninstall(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    _requested.clear()


def requested() -> bool:
    return _requested.is_set()


def check() -> None:
    """The safe point: raise `Terminated` when a stop was requested. Only the main thread stops: a helper thread
    (a heartbeat, a log pump) goes on until the main thread has given its cell back."""
    if _requested.is_set() and threading.current_thread() is threading.main_thread():
        raise Terminated()


def wait(seconds: float) -> None:
    """Sleep up to `seconds`, waking at once when a stop is requested (then `check`)."""
    _requested.wait(seconds)
    check()
