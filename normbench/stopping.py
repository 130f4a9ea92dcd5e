"""SIGTERM and SIGHUP as a request, honoured at safe points.

A scheduler's SIGTERM (SLURM, Kubernetes, `kill`) used to raise an exception wherever the main thread happened to
be, inside SQLAlchemy's weakref callbacks or a half-written ledger record included. Now the handler only records
the request; the code checks it where stopping is clean (between training batches, between cells, in the waits of
the polling loops) and raises `Terminated` there, which gives the cell in flight back like Ctrl-C does. A hang-up (a
closed terminal, a dropped ssh connection: SIGHUP to the run's process group) is the same request: by default it
killed the run where it stood, with no checkpoint and its claims left RUNNING, counted as lost attempts. A SIGHUP
ignored when the process started (`nohup`) stays ignored: the user asked the run to outlive its terminal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from normbench.errors import Terminated

# The exit code of every interrupted run, Ctrl-C, SIGTERM or SIGHUP alike (docs/faults.md): each gives the cell in
# flight back and prints how to resume, so a script or scheduler tests one value. 143 is 128 + SIGTERM, what a
# scheduler expects.
INTERRUPTED = 143

# The signals that ask for a stop (SIGHUP where the platform has one)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_requested = threading.Event()
_by: list[str] = []  # the name of the signal that asked, for the stop's message


def install() -> dict[int, Any] | None:
    """Route the stop signals to the flag; returns their previous handlers (None off the main thread, where Python
    cannot set one: there the caller's own handling stays)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _requested.clear()
    _by.clear()
    return {signum: signal.signal(signum, _request) for signum in STOP_SIGNALS if not _nohup(signum)}


def _nohup(signum: int) -> bool:
    """SIGHUP ignored when this process started (`nohup`, or a parent's choice): left so."""
    return signum != signal.SIGTERM and signal.getsignal(signum) == signal.SIG_IGN


def _request(signum: int, frame: Any) -> None:
    _by[:] = [signal.Signals(signum).name]
    _requested.set()


def uninstall(previous: dict[int, Any] | None) -> None:
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)
    _requested.clear()


def requested() -> bool:
    return _requested.is_set()


def check() -> None:
    """The safe point: raise `Terminated` when a stop was requested. Only the main thread stops: a helper thread
    (a heartbeat, a log pump) goes on until the main thread has given its cell back."""
    if _requested.is_set() and threading.current_thread() is threading.main_thread():
        raise Terminated(*_by)


def wait(seconds: float) -> None:
    """Sleep up to `seconds`, waking at once when a stop is requested (then `check`)."""
    _requested.wait(seconds)
    check()



@contextlib.contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """Hold a Ctrl-C pressed inside the block: a write whose effect the caller must know (the ledger's claim of a
    trial: RUNNING for this worker, or taken by a peer) completes, and the caller, told by the yielded list being
    non-empty, gives back what it took and raises KeyboardInterrupt itself. An exception leaving the block with a
    Ctrl-C held becomes KeyboardInterrupt. Nothing is held off the main thread (no handler can be set there) or where
    SIGINT is not Python's KeyboardInterrupt (ignored, as in a shell's background job, or handled otherwise)."""
    pressed: list[int] = []
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield pressed
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield pressed
    except BaseException as e:
        if pressed:
            raise KeyboardInterrupt from e
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
