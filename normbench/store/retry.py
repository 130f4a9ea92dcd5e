"""Wait out a database or tracking-server outage instead of dying on the first refused connection.

`Outage.call` retries transient errors (refused or reset connections, timeouts, a 5xx, SQLAlchemy's OperationalError)
with backoff for up to NORMBENCH_RETRY_SECONDS (default 300), saying once what it waits for; logic errors raise at once.
Out of time: ServerUnreachableError (exit 3), naming the URL; later calls fail fast, not waiting a second budget.
Nested calls run once. An unsafe write (queueing or finishing a trial) whose answer was lost is replayed only if the
error proves it never left (connection refused) or `landed()` says it is not there; with no `landed`, it raises.
"""

from __future__ import annotations

import math
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from normbench import settings, stopping
from normbench.errors import ServerUnreachableError

T = TypeVar("T")

FIRST_WAIT, MAX_WAIT = 0.5, 10.0
NOT_LANDED = object()  # what a `landed()` check answers when the write is not on the server

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
# Errors that prove a request never reached the server: replaying it cannot apply it twice.
_UNDELIVERED_TEXT = re.compile(
    r"connection refused|failed to establish a new connection|could not connect|name or service not known|"
    r"no route to host|network is unreachable|could not translate host name|the database system is starting up",
    re.IGNORECASE)
_UNDELIVERED_TYPES = ("ConnectionRefusedError", "NewConnectionError", "ConnectTimeout", "ConnectTimeoutError")


def retry_seconds() -> float:
    """The outage budget: NORMBENCH_RETRY_SECONDS (default 300 s; 0 disables waiting)."""
    return settings.current().retry_seconds


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, then each error it wraps (`__cause__`, else `__context__`), each once: the root comes last."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_transient(error: BaseException) -> bool:
    """True for an error that says the server is (for now) unreachable, looking through wrapped causes."""
    for e in causes(error):
        name = type(e).__name__
        if name in _LOGIC_TYPES and e is error:
            return False
        if name in _TRANSIENT_TYPES or isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if _TRANSIENT_TEXT.search(str(e).split("\n", 1)[0]):
            return True
    return False


def undelivered(error: BaseException) -> bool:
    """True when the error (or one it wraps) proves the request never reached the server."""
    return any(type(e).__name__ in _UNDELIVERED_TYPES or _UNDELIVERED_TEXT.search(str(e)) for e in causes(error))


_PASSWORD_IN_QUERY = re.compile(r"([?&](?:password|pass|pwd)=)[^&#]*", re.IGNORECASE)


def redact(url: str) -> str:
    """The URL without its password (in `user:password@` or in `?password=`), for messages and logs."""
    url = _PASSWORD_IN_QUERY.sub(r"\1***", url)
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        if ":" in creds:
            return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
    return url


class Outage:
    """Shared state of one server's retries: says once that it waits, and remembers that the budget ran out."""

    def __init__(self, what: str, seconds: float | None = None, say: Callable[[str], None] | None = None) -> None:
        self.what = redact(what)
        self.seconds = retry_seconds() if seconds is None else seconds
        self.gave_up = False
        self.errors = 0  # transient errors met so far: a caller can tell whether its call was retried
        self.back_at = -math.inf  # time.monotonic() when the server last came back after an outage
        self.down_for = 0.0  # how long that outage lasted, from this process's first failed call to its success
        self._down_since: float | None = None
        self._said = False
        self._lock = threading.Lock()
        self._inside = threading.local()  # a retried call in progress on this thread: nested calls run as they are
        self._say = say or (lambda line: print(f"normbench: {line}", file=sys.stderr, flush=True))

    def back_within(self, seconds: float) -> bool:
        """Did the server come back from an outage less than `seconds` ago? (Heartbeats meanwhile were lost.)"""
        return time.monotonic() - self.back_at < seconds

    def came_back(self, down_for: float) -> None:
        """The server answered again after `down_for` s of failed calls made outside the retries (a heartbeat's)."""
        with self._lock:
            self.back_at, self.down_for = time.monotonic(), down_for

    def call(self, fn: Callable[..., T], *args: Any, unsafe: bool = False,
             landed: Callable[[], Any] | None = None, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)`, retried; `fn` may be an idempotent composite (find, else create). `unsafe`: a replay
        could apply the write twice; `landed()` then returns what `fn` would have if the write landed, or NOT_LANDED."""
        if getattr(self._inside, "active", False):
            return fn(*args, **kwargs)
        self._inside.active = True
        try:
            return self._retry(lambda: fn(*args, **kwargs), unsafe, landed)
        finally:
            self._inside.active = False

    def _retry(self, fn: Callable[[], T], unsafe: bool, landed: Callable[[], Any] | None) -> T:
        deadline = time.monotonic() + (0.0 if self.gave_up else self.seconds)
        wait = FIRST_WAIT
        maybe_applied = False  # an earlier try may have reached the server: ask before replaying
        while True:
            try:
                if maybe_applied and landed is not None and (found := landed()) is not NOT_LANDED:
                    return self._back(found)
                result = fn()
            except Exception as e:
                if not is_transient(e):
                    raise
                if unsafe and not undelivered(e):
                    if landed is None:
                        raise  # it may have been applied and nothing tells: a replay could apply it twice
                    maybe_applied = True
                left = deadline - time.monotonic()
                if left <= 0:
                    self.gave_up = True
                    raise ServerUnreachableError(
                        f"{self.what} unreachable for {self.seconds:.0f} s (NORMBENCH_RETRY_SECONDS): "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\nStart it again and run the "
                        "same command to resume: finished cells are kept, the cell in flight is queued again."
                    ) from None
                with self._lock:
                    self.errors += 1
                    if self._down_since is None:
                        self._down_since = time.monotonic()
                    if not self._said:
                        self._said = True
                        self._say(f"{self.what} is unreachable ({type(e).__name__}); waiting up to "
                                  f"{self.seconds:.0f} s for it (NORMBENCH_RETRY_SECONDS)")
                stopping.wait(min(wait * (0.5 + random.random()), left, MAX_WAIT))  # SIGTERM ends the wait
                wait = min(wait * 2, MAX_WAIT)
                continue
            return self._back(result)

    def _back(self, result: T) -> T:
        if self._said or self.gave_up or self._down_since is not None:
            with self._lock:
                if self._said:
                    self._say(f"{self.what} is back")
                if self._down_since is not None:
                    self.back_at = time.monotonic()
                    self.down_for = self.back_at - self._down_since
                    self._down_since = None
                self._said = self.gave_up = False
        return result
