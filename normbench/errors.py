"""Errors a user can fix. The CLI prints their message (no traceback) and exits with `exit_code`."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class NormbenchError(Exception):
    """Base class: a problem in the user's input or environment, with a message that names the fix."""

    exit_code = 2


class UnknownLayerError(NormbenchError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class SuiteError(NormbenchError):
    """A malformed suite file: names the file, the key, the bad value and the closest valid one."""


class DatasetNotFoundError(NormbenchError):
    """A dataset is not where the suite says it is: names the path and how to obtain it."""


class ServerUnreachableError(NormbenchError):
    """A database or tracking server that cannot be reached: names the URL."""

    exit_code = 3


class ClaimLostError(Exception):
    """This worker's cell was taken over by another (it stalled or was cut off past the heartbeat grace period):
    it stops that cell and goes on; not a user error, never shown as one."""


def did_you_mean(value: object, choices: Iterable[str], otherwise: str | None = None) -> str:
    """' (did you mean `x`?)' for the closest choice, or when none is close ' (choose from a, b, c)', or
    ' (otherwise)' when given (for lists too long to print)."""
    choices = sorted(str(c) for c in choices)
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
    if close:
        return f" (did you mean `{close[0]}`?)"
    return f" ({otherwise})" if otherwise else f" (choose from {', '.join(choices)})"


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or `kill`'s stop) or SIGHUP (a hang-up), raised where Ctrl-C raises KeyboardInterrupt:
    the same code gives the running cell back and prints how to resume. `signal`: the name of the one that asked."""

    def __init__(self, signal: str = "SIGTERM") -> None:
        super().__init__(signal)
        self.signal = signal
