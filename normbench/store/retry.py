"""Wait out a database or tracking-server outage instead of dying on the first refused connection.

`retrying(obj, what=url)` replaces each public method of `obj` (an Optuna storage, an MlflowClient) on that instance,
and the private ones named in `private=`, by one that retries transient errors (connection refused or reset,
timeouts, a 5xx, SQLAlchemy's OperationalError) with backoff for up to NORMBENCH_RETRY_SECONDS (default 300), saying
once what it waits for. Logic errors (a finished trial, a missing run) are raised at once. When the time runs out it
raises ServerUnreachableError (exit 3) naming the URL; after that the object fails fast, so closing runs on the way
out does not wait a second budget.
Patching the instance, not proxying it, keeps `isinstance` checks (Optuna's heartbeat code makes them) true.
A retried method that calls another runs it once, unwrapped: the outermost call retries, within one budget.
"""

from __future__ import annotations

import functools
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from normbench.errors import ServerUnreachableError

T = TypeVar("T")

DEFAULT_SECONDS = 300.0
FIRST_WAIT, MAX_WAIT = 0.5, 10.0

# Words in the message of an exception (or of one it wraps) that mean "the server is away", not "you asked wrong".
_TRANSIENT_TEXT = re.compile(
    r"connection refused|connection reset|connection aborted|could not connect|server closed the connection|"
    r"max retries exceeded|timed out|timeout|temporarily unavailable|terminating connection|database is locked|"
    r"connection (?:is )?closed|broken pipe|name or service not known|bad gateway|service unavailable|"
    r"gateway time-?out|status code 50[234]|response code 50[234]|the database system is",
    re.IGNORECASE)
_TRANSIENT_TYPES = ("OperationalError", "InterfaceError", "DisconnectionError", "ConnectionError", "Timeout",
                    "ConnectTimeout", "ReadTimeout", "TimeoutError", "ConnectionRefusedError", "ConnectionResetError",
                    "BrokenPipeError", "RemoteDisconnected", "ProtocolError", "MaxRetryError")
_LOGIC_TYPES = ("UpdateFinishedTrialError", "DuplicatedStudyError", "IntegrityError", "KeyError", "ValueError")


def retry_seconds() -> float:
    """The outage budget: NORMBENCH_RETRY_SECONDS (default 300 s; 0 disables waiting)."""
    return float(os.environ.get("NORMBENCH_RETRY_SECONDS", DEFAULT_SECONDS))


def is_transient(error: BaseException) -> bool:
    """True for an error that says the server is (for now) unreachable, looking through wrapped causes."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        name = type(e).__name__
        if name in _LOGIC_TYPES and e is error:
            return False
        if name in _TRANSIENT_TYPES or isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if _TRANSIENT_TEXT.search(str(e).split("\n", 1)[0]):
            return True
        e = e.__cause__ or e.__context__
    return False


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url


class Outage:
    """Shared state of one server's retries: says once that it waits, and remembers that the budget ran out."""

    def __init__(self, what: str, seconds: float | None = None, say: Callable[[str], None] | None = None) -> None:
        self.what = redact(what)
        self.seconds = retry_seconds() if seconds is None else seconds
        self.gave_up = False
        self._said = False
        self._lock = threading.Lock()
        self._inside = threading.local()  # a retried call in progress on this thread: nested calls run as they are
        self._say = say or (lambda line: print(f"normbench: {line}", file=sys.stderr, flush=True))

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if getattr(self._inside, "active", False):
            return fn(*args, **kwargs)
        self._inside.active = True
        try:
            return self._retry(fn, *args, **kwargs)
        finally:
            self._inside.active = False

    def _retry(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        deadline = time.monotonic() + (0.0 if self.gave_up else self.seconds)
        wait = FIRST_WAIT
        while True:
            try:
                result = fn(*args, **kwargs)
            except Exception as e:
                if not is_transient(e):
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    self.gave_up = True
                    raise ServerUnreachableError(
                        f"{self.what} unreachable for {self.seconds:.0f} s (NORMBENCH_RETRY_SECONDS): "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\nStart it again and run the "
                        "same command to resume: finished cells are kept, the cell in flight is queued again."
                    ) from None
                with self._lock:
                    if not self._said:
                        self._said = True
                        self._say(f"{self.what} is unreachable ({type(e).__name__}); waiting up to "
                                  f"{self.seconds:.0f} s for it (NORMBENCH_RETRY_SECONDS)")
                time.sleep(min(wait * (0.5 + random.random()), left, MAX_WAIT))
                wait = min(wait * 2, MAX_WAIT)
                continue
            if self._said or self.gave_up:
                with self._lock:
                    if self._said:
                        self._say(f"{self.what} is back")
                    self._said = self.gave_up = False
            return result


def retrying(obj: T, what: str, *, seconds: float | None = None, outage: Outage | None = None,
             private: tuple[str, ...] = ()) -> T:
    """Patch every public method of `obj`, and the private ones in `private` (those a wrapper around `obj` calls,
    as Optuna's cache calls its storage's `_get_trials`), to retry transient errors (see the module docstring);
    returns `obj`. The original methods stay reachable as `obj._normbench_raw[name]`."""
    outage = outage or Outage(what, seconds)
    raw: dict[str, Callable[..., Any]] = {}
    for name in dir(type(obj)):
        if name.startswith("_") and name not in private:
            continue
        method = getattr(obj, name, None)
        if not callable(method) or isinstance(method, type):
            continue
        raw[name] = method
        setattr(obj, name, _retry_method(method, outage))
    obj._normbench_raw = raw  # type: ignore[attr-defined]
    obj._normbench_outage = outage  # type: ignore[attr-defined]
    return obj


def raw(obj: Any, name: str) -> Callable[..., Any]:
    """`obj.name` without retries (for callers that keep their own rhythm, e.g. the heartbeat)."""
    return getattr(obj, "_normbench_raw", {}).get(name) or getattr(obj, name)


def _retry_method(method: Callable[..., Any], outage: Outage) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        return outage.call(method, *args, **kwargs)

    return call
