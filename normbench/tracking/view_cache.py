"""What `normbench ui` prepared last time, kept in the store it describes, so that opening a folder whose ledger has
not changed skips the sync and the view's preparation: a published folder's store is up to date after its first
`ui`, and the next one answers as soon as MLflow's server does (~75% of the wait before, on a loaded machine).

The key is a fingerprint of everything the sync and the view read, from `os.stat` alone: the ledger journal, the
folder's suite.yaml and leaderboard files (the parent run's artifacts), the run layout and normbench's tracking code.
Any change, or a store without the tag, means the full path: sync, prepare, remember. It is read with sqlite3, not
MLflow (whose import costs seconds): only the folder's own SQLite store is cached; a server's never.
`normbench sync` always compares run by run (a run deleted by hand in the UI comes back there).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.contracts.names import OutputFolder
from normbench.tracking.mlflow_store import ARTIFACTS, own_store
from normbench.tracking.run_record import LAYOUT

CACHE_TAG = "normbench.view"  # the experiment tag holding the last prepared view and its fingerprint
MAX_TAG = 5000  # MLflow's longest experiment tag value: a longer view is not cached (prepared each time)
SQLITE = "sqlite:///"


@dataclass(frozen=True)
class PreparedView:
    """What `prepare_experiment` returns, and what the server and the printed URLs need."""

    experiment_id: str
    colours: dict[str, str]
    depths: list[str]


def fingerprint(out: Path) -> str | None:
    """A digest of the stats (size, mtime) of what a sync and the view read; None without a ledger journal (a
    database ledger's changes cannot be seen from here)."""
    folder = OutputFolder(out)
    if not folder.ledger.is_file():
        return None
    files = [folder.ledger, folder.suite, *sorted({p for pattern in ARTIFACTS for p in folder.path.glob(pattern)}),
             *sorted(Path(__file__).parent.glob("*.py"))]  # the code that syncs and draws the view
    stats = [(str(p.name), *_stat(p)) for p in files]
    return hashlib.sha256(json.dumps([LAYOUT, stats]).encode()).hexdigest()[:32]


def _stat(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return -1, -1
    return stat.st_size, stat.st_mtime_ns


def cached_view(uri: str, out: Path, key: str | None) -> PreparedView | None:
    """The view `remember` stored under fingerprint `key` in the folder's own store, or None (another key, no tag,
    no store, not the folder's own SQLite store, or anything unreadable: the full path then)."""
    experiment = OutputFolder(out).saved_suite().get("name")
    if key is None or not experiment or not own_store(uri, out):
        return None
    path = Path(uri[len(SQLITE):])
    if not path.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            row = db.execute("SELECT e.experiment_id, t.value FROM experiments e JOIN experiment_tags t "
                             "ON t.experiment_id = e.experiment_id WHERE e.name = ? AND e.lifecycle_stage = 'active' "
                             "AND t.key = ?", (str(experiment), CACHE_TAG)).fetchone()
    except sqlite3.Error:  # another MLflow schema, a locked or damaged file: not worth more than the full path
        return None
    if row is None:
        return None
    try:
        saved = json.loads(row[1])
    except ValueError:
        return None
    if saved.get("fingerprint") != key:
        return None
    return PreparedView(str(row[0]), dict(saved.get("colours") or {}), list(saved.get("depths") or []))


def remember(client: Any, view: PreparedView, key: str | None) -> None:
    """Store `view` under fingerprint `key` in the experiment (taken before the sync read the ledger)."""
    if key is None:
        return
    value = json.dumps({"fingerprint": key, "colours": view.colours, "depths": view.depths})
    if len(value) <= MAX_TAG:
        client.set_experiment_tag(view.experiment_id, CACHE_TAG, value)
