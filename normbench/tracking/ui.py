"""`normbench ui`: MLflow's UI on the suite's comparison (view_state.py) in seconds; it syncs first, so any folder
opens. MLflow 3 shows an experiment as GenAI unless its kind tag and URL (`workflowType=machine_learning`) say model
training. The server is one uvicorn process serving ui_app.py, set up as `mlflow server` sets up its workers minus the
GenAI job runner: ~5 CPU-seconds to answer vs ~27 for `mlflow ui`'s 15 processes. Log: `<out>/mlflow-ui.log`.
Where the time goes (a copy of the modern folder, 473 runs, on a loaded 2-core machine): MLflow's server importing
its app, the sync (the ledger's replay, MLflow's import, one search) and the view's preparation (another search),
once each in turn. So the server starts first when the store exists (its start overlaps the rest), and a folder whose
ledger and files have not changed since the last `ui` skips the sync and the preparation (view_cache.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from normbench import stopping
from normbench.contracts.names import OutputFolder
from normbench.errors import NormbenchError
from normbench.tracking.mlflow_store import KIND, KIND_TAG, open_client
from normbench.tracking.run_record import axes_of
from normbench.tracking.view_cache import SQLITE, PreparedView, cached_view, fingerprint, remember
from normbench.tracking.view_state import SHARE_KEY, group_colours, share_key, view_state

UI_LOG = "mlflow-ui.log"
APP = "normbench.tracking.ui_app:app"  # MLflow's app, its page given the groups' colours
COLOURS_ENV = "_NORMBENCH_UI_GROUP_COLOURS"  # JSON {group id: colour} for the app (internal to the server)
COLOURS_FILE_ENV = "_NORMBENCH_UI_GROUP_COLOURS_FILE"  # or a file of it: a server started before they are known
# What `mlflow server` puts in its workers' env (mlflow/server/__init__.py); tests/tracking/test_ui_server.py checks it.
BACKEND_STORE_ENV, ARTIFACT_ROOT_ENV = "_MLFLOW_SERVER_FILE_STORE", "_MLFLOW_SERVER_ARTIFACT_ROOT"
NO_JOBS_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"


def ui_url(host: str, port: int, experiment_id: str, charts: bool = False, key: str = SHARE_KEY) -> str:
    """The experiment's runs table (or its chart view) in the model-training workflow, with the shared view `key`."""
    return (f"http://{_reachable(host)}:{port}/#/experiments/{experiment_id}/runs"
            f"?workflowType=machine_learning&viewStateShareKey={key}" + ("&compareRunsMode=CHART" * charts))


def suite_axes(out: Path, params: list[dict[str, str]]) -> list[str]:
    """The columns that tell cells apart: `out/suite.yaml`'s matrix axes and tuned keys, in its order (YAML only: no
    torch import); else the axes the runs' params name (tracking/run_record.py `run_params`, `axes_of`)."""
    logged = {k for p in params for k in p}
    axes = sorted({k for p in params for k in axes_of(p)})
    suite = OutputFolder(out).saved_suite()
    if not isinstance(suite.get("matrix"), dict):
        return axes
    matrix = list(suite["matrix"])
    space = suite["tune"].get("space") if isinstance(suite.get("tune"), dict) else None
    tuned = list(space) if isinstance(space, dict) else []
    ordered = [*matrix, *sorted(k for k in logged if k.rsplit(".", 1)[-1] in tuned and k not in matrix)]
    return [a for a in ordered if a in logged] + [a for a in axes if a not in ordered]


def prepare_experiment(uri: str, out: Path) -> tuple[str, dict[str, str], list[str]]:
    """Tag the suite's experiment with the model-training kind and a shared view per depth (view_state.share_key);
    returns its id, the group colours and the depths, deepest first (the view that opens) ([] without a depth axis)."""
    client = open_client(uri, out)
    experiment = _suite_experiment(client, out)
    runs = client.search_runs([experiment.experiment_id], max_results=50_000)
    metrics = {k for r in runs for k in r.data.metrics}
    # `role` is a param too, but no axis: its tag filters the view
    axes = [a for a in suite_axes(out, [r.data.params for r in runs]) if a != "role"]
    reports = any(r.data.tags.get("role") == "report" for r in runs)
    colours = group_colours((r.data.params for r in runs), axes, _suite_layers(out))
    depths = sorted({r.data.params["depth"] for r in runs if "depth" in r.data.params}, key=_number, reverse=True)
    client.set_experiment_tag(experiment.experiment_id, KIND_TAG, KIND)
    for depth in depths or [None]:
        groups = [g for g in colours if depth is None or g.startswith(f"param.depth.{depth},")]
        state = view_state(axes, metrics, reports, groups=groups, depth=depth)
        key = share_key(depth, depths[0] if depths else None)
        client.set_experiment_tag(experiment.experiment_id, f"mlflow.sharedViewState.{key}", json.dumps(state))
    return experiment.experiment_id, colours, depths


def depth_urls(host: str, port: int, experiment_id: str, depths: list[str]) -> list[str]:
    """`  depth 24: URL` for each depth after the deepest (whose view the first URL opens), deepest first."""
    return [f"  depth {d}: {ui_url(host, port, experiment_id, key=share_key(d, depths[0]))}" for d in depths[1:]]


def _suite_layers(out: Path) -> list[str]:
    matrix = OutputFolder(out).saved_suite().get("matrix")
    layers = matrix.get("layer") if isinstance(matrix, dict) else None
    return [str(x) for x in layers] if isinstance(layers, list) else []


def _number(text: str) -> tuple[float, str]:
    try:
        return float(text), text
    except ValueError:
        return float("-inf"), text


def _suite_experiment(client: Any, out: Path) -> Any:
    """The experiment named by `out/suite.yaml`, else the one experiment with runs (the newest if several)."""
    name = OutputFolder(out).saved_suite().get("name")
    if name and (found := client.get_experiment_by_name(str(name))) is not None:
        return found
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    if not experiments:
        raise NormbenchError(f"{out}: its ledger holds no finished cell yet; run the suite first "
                             "(`normbench run suites/smoke.yaml`)")
    return max(experiments, key=lambda e: e.last_update_time or 0)


def check_port(host: str, port: int) -> None:
    """Raise a NormbenchError naming the port and `--port` when something already listens there."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as e:
            raise NormbenchError(f"port {port} on {host} is in use ({e.strerror}); pass a free one, e.g. "
                                 f"`normbench ui ... --port {port + 1}`") from None


def server_command(uri: str, out: Path, host: str, port: int, colours: dict[str, str] | None = None,
                   colours_file: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The UI server's command and env: one uvicorn process serving ui_app.py on `uri`, no job runner, no access log;
    the groups' colours as JSON, or in `colours_file` (read at each page load)."""
    cmd = [sys.executable, "-m", "uvicorn", APP, "--host", host, "--port", str(port), "--workers", "1",
           "--no-access-log", "--timeout-graceful-shutdown", "3"]
    env = {**os.environ, BACKEND_STORE_ENV: uri,
           ARTIFACT_ROOT_ENV: OutputFolder(Path(out).resolve()).mlflow_artifacts.as_uri(),
           NO_JOBS_ENV: "false", "_MLFLOW_SGI_NAME": "uvicorn", "_MLFLOW_IN_JOB_EXECUTOR": "false",
           "_MLFLOW_SERVER_BOOT_ID": uuid.uuid4().hex, COLOURS_ENV: json.dumps(colours or {}),
           **({COLOURS_FILE_ENV: str(colours_file)} if colours_file else {})}
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    return cmd, env


def open_view(uri: str, out: Path, storage: str | None = None) -> PreparedView:
    """The store brought up to date from the ledger and the suite's view tagged on its experiment; or, when nothing
    they read changed since the last `ui` (view_cache.py), what that one prepared, without opening MLflow."""
    key = fingerprint(out) if storage is None else None  # before the sync reads the ledger: a later write is new
    if (cached := cached_view(uri, out, key)) is not None:
        print(f"MLflow {uri}: as the last `normbench ui` left it (the ledger, suite.yaml and leaderboard files are "
              "unchanged): nothing to sync", file=sys.stderr)
        return cached
    from normbench.tracking.sync import sync

    print(sync(out, storage, uri).line(), file=sys.stderr)
    view = PreparedView(*prepare_experiment(uri, out))
    remember(open_client(uri, out), view, key)
    return view


def run_ui(uri: str, out: Path, host: str, port: int, open_browser: bool, storage: str | None = None) -> int:
    """Sync and tag the experiment (open_view) while the server starts, print the URLs once it answers; wait until it
    exits or Ctrl-C/SIGTERM. The server starts first when the store exists (MLflow's import overlaps the sync); a
    new store is made by the sync before a server opens it (two processes creating MLflow's tables would race)."""
    log_path = OutputFolder(out) / UI_LOG
    colours_file = Path(tempfile.mkdtemp(prefix="normbench-ui-")) / "colours.json"
    colours_file.write_text("{}")
    server = _start(uri, out, host, port, colours_file, log_path) if _store_exists(uri) else None
    try:
        view = open_view(uri, out, storage)
        colours_file.write_text(json.dumps(view.colours))
        if server is None:
            server = _start(uri, out, host, port, colours_file, log_path)
        return serve(server, view, host, port, log_path, open_browser)
    finally:
        if server is not None:
            _stop(server)
        colours_file.unlink(missing_ok=True)
        colours_file.parent.rmdir()


def serve(server: subprocess.Popen, view: PreparedView, host: str, port: int, log_path: Path,
          open_browser: bool) -> int:
    """Print the URLs once the server answers, then wait until it exits or Ctrl-C/SIGTERM."""
    if not _wait_until_up(f"http://{_reachable(host)}:{port}/health", server):
        raise NormbenchError(f"the MLflow UI server exited with code {server.returncode} before answering; "
                             f"its log, {log_path}, ends with:\n{_tail(log_path)}")
    experiment_id, depths = view.experiment_id, view.depths
    url = ui_url(host, port, experiment_id)
    shown = f" (depth {depths[0]}; the others below)" if len(depths) > 1 else ""
    print("\n".join([f"MLflow UI: {url}  (Ctrl-C stops it){shown}",
                     f"  charts: {ui_url(host, port, experiment_id, charts=True)}",
                     *depth_urls(host, port, experiment_id, depths), f"  server log: {log_path}"]), flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    while server.poll() is None:  # until the server exits, Ctrl-C or SIGTERM
        stopping.wait(0.5)
    return server.returncode


def _store_exists(uri: str) -> bool:
    return uri.startswith(SQLITE) and Path(uri[len(SQLITE):]).is_file()


def _start(uri: str, out: Path, host: str, port: int, colours_file: Path, log_path: Path) -> subprocess.Popen:
    cmd, env = server_command(uri, out, host, port, colours_file=colours_file)
    with open(log_path, "w") as log:
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def _reachable(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host  # a server on every interface answers on loopback


def _wait_until_up(health: str, server: subprocess.Popen, timeout: float = 120.0) -> bool:
    """True once `health` answers; False when the server exits first. After `timeout`, True if it still runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(health, timeout=2):
                return True
        except OSError:
            time.sleep(0.1)
    return server.poll() is None


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(unreadable)"
