"""The suite file as `run` and `tune` read it: what their local workers load and what OUT/suite.yaml records.

An edit while a run starts must not split it (workers refusing or training the edit while the parent trains what it
read), so the parent copies the file once, before writing anything, and checks it still loads as its suite. A later
edit is not this run's: said once when the workers start, checked by the next run."""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
from pathlib import Path

from normbench.contracts.suite import Suite, load_suite
from normbench.errors import SuiteError


def take_snapshot(suite: Suite) -> Path:
    """A private copy of `suite.path` for this process's life; SuiteError (exit 2) if it changed since it was loaded."""
    try:
        data = suite.path.read_bytes()
    except OSError as e:
        raise SuiteError(f"{suite.path}: cannot read it again ({e.strerror}); it was moved or deleted while this "
                         "command was starting. Nothing was written.") from None
    copy = private_copy(suite.path.name, data)
    if not _says(copy, suite):
        raise SuiteError(f"{suite.path}: changed while this command was starting (it no longer says the suite read "
                         "a moment ago); run the command again to use it as it is now. Nothing was written.")
    return copy


def private_copy(name: str, data: bytes) -> Path:
    """`data` in a file named `name`, in a temporary folder removed when this process exits: a suite as this process
    read it (`take_snapshot`) or as `--set` leaves it (cli.py), which its workers load and OUT/suite.yaml records."""
    folder = Path(tempfile.mkdtemp(prefix="normbench-suite-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    copy = folder / name
    copy.write_bytes(data)
    return copy


def changed_since(suite: Suite, snapshot: Path) -> bool:
    """Whether the suite's file no longer holds the snapshot's bytes (an edit, or the file gone)."""
    try:
        return suite.path.read_bytes() != snapshot.read_bytes()
    except OSError:
        return True


def _says(path: Path, suite: Suite) -> bool:
    """Whether the file at `path` loads as `suite` (`--bracket` is the command line's, not the file's)."""
    try:
        again = load_suite(path)
    except SuiteError:
        return False
    return dataclasses.replace(again, path=suite.path, bracket=suite.bracket) == suite
