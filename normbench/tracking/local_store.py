"""A local MLflow store (a SQLite file) that breaks mid-run is a fault to name, not an outage to wait out.

A server that goes away comes back (store/retry.py waits for it); a SQLite file that was deleted or replaced, made
read-only, or whose disk is full does not. `guard(client, uri, out_dir)` makes every call of the Tracker's client on
a SQLite store first check that the file it opened is still the one at its path, and turns SQLite's "readonly
database", "database or disk is full", "disk I/O error" (and an OSError of the local artifact store) into
TrackingStoreError naming the file and the fix, at once. A full disk also frees the folder's reserve
(store/reserve.py), so the cell in flight can still be given back. MLflow's log line with a traceback for each
database error is dropped: normbench reports the error itself, once.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from normbench.errors import ServerUnreachableError
from normbench.store import reserve

T = TypeVar("T")

# SQLite's words for a store that cannot be written here and now, whatever the wait: what is wrong, and the fix
_FAULTS = (("readonly database", "became read-only", "make it writable (chmod u+w, a read-write mount)"),
           ("database or disk is full", "has no room: the disk is full", "free space"),
           ("disk i/o error", "cannot be written: a disk I/O error", "check the disk"),
           ("unable to open database file", "cannot be opened (its folder was deleted or made unreadable?)",
            "restore the folder"),
           ("no such table", "is no MLflow store any more (deleted and created again empty?)",
            "restore the file"))
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)


class TrackingStoreError(ServerUnreachableError):
    """The local MLflow store cannot be written (deleted, replaced, read-only, disk full): nothing to wait for, so
    exit 2 at once; handled like an outage otherwise (the cell in flight is given back; a finished cell's summary
    is spooled for the next run)."""

    exit_code = 2


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///...` tracking URI (also `sqlite:///file:...?mode=ro&uri=true`), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = unquote(uri[len("sqlite:///"):].split("?", 1)[0])
    return Path(path[len("file:"):] if path.startswith("file:") else path)


def guard(client: T, uri: str, out_dir: Path) -> T:
    """Patch `client`'s public methods (see the module docstring); returns it. A server's client is left as it is."""
    quiet_database_errors()  # a database behind MLFLOW_TRACKING_URI too: an outage is said once by the retries
    db = sqlite_path(uri)
    if db is None:
        return client
    store = _Store(db, Path(out_dir))
    for name in dir(type(client)):
        method = getattr(client, name, None)
        if name.startswith("_") or not callable(method) or isinstance(method, type):
            continue
        setattr(client, name, store.wrap(method))
    return client


class _Store:
    def __init__(self, db: Path, out_dir: Path) -> None:
        self.db, self.out_dir = db, out_dir
        self.identity = _identity(db)  # the file this process opened

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.check()
            fault = None
            try:
                return method(*args, **kwargs)
            except Exception as e:
                fault = self.fault(e)
                if fault is None:
                    raise
            raise fault  # outside the handler: no chained error for the retry wrapper to take for an outage

        return call

    def check(self) -> None:
        now = _identity(self.db)
        if now == self.identity or self.identity is None:
            self.identity = self.identity or now
            return
        what = "was deleted or moved away" if now is None else "was replaced by another file"
        raise self._error(f"{what} while this run logged to it (what it logs now would be lost)",
                          "restore it, or run the same command to go on with a new, empty store")

    def fault(self, error: BaseException) -> TrackingStoreError | None:
        """The TrackingStoreError for an error that means the store is broken here, else None (an outage, a bug)."""
        seen: set[int] = set()
        e: BaseException | None = error
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    reserve.free(self.out_dir)
                fix = {errno.ENOSPC: "free space", errno.EDQUOT: "free space", errno.EIO: "check the disk"}
                return TrackingStoreError(f"{e.filename or self.db}: cannot write the MLflow store ({e.strerror}); "
                                          f"{fix.get(e.errno, 'make it writable')}, then {_RESUME}")
            text = str(e).split("\n", 1)[0].lower()
            for words, what, fix in _FAULTS:
                if words in text:
                    if words == "database or disk is full":
                        reserve.free(self.out_dir)
                    return self._error(f"{what} (SQLite: {words})", fix)
            e = e.__cause__ or e.__context__
        return None

    def _error(self, what: str, fix: str) -> TrackingStoreError:
        return TrackingStoreError(f"{self.db}: the MLflow store {what}; {fix}, then {_RESUME}")


_RESUME = ("run the same command to resume (finished cells are kept in the ledger; the cell in flight runs again). "
           "Not an outage: nothing to wait for")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


class _DropDatabaseErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error")


def quiet_database_errors() -> None:
    """MLflow logs each database error with its traceback before raising it; normbench says what it means once."""
    logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, _DropDatabaseErrors) for f in logger.filters):
        logger.addFilter(_DropDatabaseErrors())
