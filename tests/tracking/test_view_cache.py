"""`normbench ui` on a folder whose ledger, suite and leaderboard files have not changed since its last `ui` skips the
sync and the view's preparation (tracking/view_cache.py): the view comes back from the store itself, read without
MLflow; any change to what they read means the full path again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.tracking import sync as sync_module
from normbench.tracking import ui
from normbench.tracking.mlflow_store import open_client
from normbench.tracking.view_cache import PreparedView, cached_view, fingerprint, remember
from tests.conftest import REPO
from tests.tracking.ledgers import write_ledger


def uri_of(out: Path) -> str:
    return f"sqlite:///{out.resolve() / 'mlflow.db'}"


def test_the_fingerprint_moves_with_the_ledger_the_suite_and_the_leaderboard_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert fingerprint(out) is None  # no journal: nothing to compare (a database ledger is always synced)
    write_ledger(out)
    first = fingerprint(out)
    assert first is not None and fingerprint(out) == first  # os.stat alone: the same folder, the same key
    for name in ("ledger.journal", "suite.yaml", "leaderboard.md", "accuracy_vs_depth.png"):
        path = out / name
        path.write_bytes(path.read_bytes() + b"\n" if path.exists() else b"new")
        assert fingerprint(out) != first, name
        first = fingerprint(out)
    (out / "mlflow-ui.log").write_text("the server's log")  # not read by a sync or the view
    assert fingerprint(out) == first


def test_a_remembered_view_comes_back_from_the_store_only_under_its_key(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_ledger(out)
    uri, key = uri_of(out), fingerprint(out)
    assert cached_view(uri, out, key) is None  # no store yet
    sync_module.sync(out, tracking_uri=uri)
    view = PreparedView(*ui.prepare_experiment(uri, out))
    assert cached_view(uri, out, key) is None  # prepared, not remembered
    remember(open_client(uri, out), view, key)
    assert cached_view(uri, out, key) == view  # read back with sqlite3 from MLflow's own tables
    assert cached_view(uri, out, "another key") is None
    assert cached_view(f"sqlite:///{tmp_path / 'elsewhere.db'}", out, key) is None  # only the folder's own store
    assert cached_view(uri, out, None) is None


def test_a_second_ui_of_an_unchanged_folder_neither_syncs_nor_prepares(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "out"
    write_ledger(out)
    uri = uri_of(out)
    first = ui.open_view(uri, out)
    assert "2 runs added" in capsys.readouterr().err

    def refused(*args, **kwargs):
        raise AssertionError("synced or prepared again")

    monkeypatch.setattr(sync_module, "sync", refused)
    monkeypatch.setattr(ui, "prepare_experiment", refused)
    assert ui.open_view(uri, out) == first
    assert "nothing to sync" in capsys.readouterr().err
    (out / "ledger.journal").touch()  # a worker wrote (its mtime moved): the full path again
    with pytest.raises(AssertionError, match="synced or prepared again"):
        ui.open_view(uri, out)


def test_the_server_starts_before_the_sync_when_the_store_exists(tmp_path: Path, monkeypatch) -> None:
    """MLflow's server imports its app for seconds: it does so while the ledger is synced, not after."""
    out = tmp_path / "out"
    write_ledger(out)
    calls = []
    stand_in = [sys.executable, "-c", "import time; time.sleep(30)"]
    monkeypatch.setattr(ui, "server_command", lambda *args, **kwargs: (calls.append("server") or stand_in, {}))
    monkeypatch.setattr(ui, "open_view", lambda *args: calls.append("sync") or PreparedView("1", {}, []))
    monkeypatch.setattr(ui, "serve", lambda *args: 0)
    ui.run_ui(uri_of(out), out, "127.0.0.1", 1, open_browser=False)
    assert calls == ["sync", "server"]  # no store yet: the sync makes it before a server opens it
    (out / "mlflow.db").touch()
    calls.clear()
    ui.run_ui(uri_of(out), out, "127.0.0.1", 1, open_browser=False)
    assert calls == ["server", "sync"]


def test_the_ui_imports_no_torch_pandas_optuna_or_mlflow_before_it_needs_them() -> None:
    """What `normbench ui` imports before its server answers: torch and pandas cost it 4-5 s on a loaded machine."""
    code = ("import sys, normbench.cli, normbench.tracking.ui; "
            "print(sorted(m for m in ('torch', 'pandas', 'optuna', 'mlflow') if m in sys.modules))")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"
