"""`normbench ui`: MLflow's UI opened on the suite's comparison, not on its GenAI overview.

MLflow 3 opens an experiment on GenAI pages unless the experiment's kind (`mlflow.experimentKind`) and the UI's
workflow (`?workflowType=machine_learning`) say model training. The runs table's columns and sort order come from a
*shared view*: the JSON a user's "Share" button stores in the experiment tag `mlflow.sharedViewState.<key>`, which
the page applies when its URL carries `viewStateShareKey=<key>`. We write that tag ourselves: the axes and the score
as visible columns, sorted by the score (best first). Sorting by a metric also lists the nested cells flat, so each
cell is a row and the parent `leaderboard` run (no score) sorts last.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from normbench.errors import NormbenchError
from normbench.spec.names import OutputFolder

SHARE_KEY = "normbench-comparison"
SHARE_TAG = f"mlflow.sharedViewState.{SHARE_KEY}"
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
SCORE_COLUMNS = ("score", "select", "diverged")  # metrics: test and val top-1 (spec.selection.cell_scores)


def column(kind: str, name: str) -> str:
    """MLflow UI's column key, e.g. params.`layer`."""
    return f"{kind}.`{name}`"


def view_state(axes: list[str]) -> dict[str, Any]:
    """The runs table MLflow's UI shows: run name, each axis, then the score columns; best score first."""
    columns = [column("attributes", "Run Name"), *(column("params", a) for a in axes),
               *(column("metrics", m) for m in SCORE_COLUMNS)]
    return {"orderByKey": column("metrics", SCORE_COLUMNS[0]), "orderByAsc": False, "searchFilter": "",
            "lifecycleFilter": "Active", "selectedColumns": columns, "viewMaximized": False, "runListHidden": False}


def ui_url(host: str, port: int, experiment_id: str) -> str:
    """The experiment's runs table in the model-training workflow, with the shared view applied."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return (f"http://{shown}:{port}/#/experiments/{experiment_id}/runs"
            f"?workflowType=machine_learning&viewStateShareKey={SHARE_KEY}")


def suite_axes(out: Path, params: list[dict[str, str]]) -> list[str]:
    """The columns that tell cells apart: the suite's matrix axes and tuned keys when `out/suite.yaml` exists, in
    its order; else every param without a section prefix (an axis, see sweep/cells.py cell_params)."""
    logged = {k for p in params for k in p}
    axes = sorted(k for k in logged if "." not in k)
    if OutputFolder(out).suite.exists():
        from normbench.spec.suite import load_suite

        try:
            suite = load_suite(OutputFolder(out).suite)
        except NormbenchError:
            return axes
        tuned = list(suite.tune.space) if suite.tune else []
        ordered = [*suite.matrix, *(k for k in logged if k.rsplit(".", 1)[-1] in tuned and k not in suite.matrix)]
        return [a for a in ordered if a in logged] + [a for a in axes if a not in ordered]
    return axes


def prepare_experiment(uri: str, out: Path) -> str:
    """Tag the suite's experiment with the model-training kind and the comparison view; returns its id."""
    from mlflow.tracking import MlflowClient

    from normbench.tracking.tracker import quiet_mlflow_logging

    quiet_mlflow_logging()
    client = MlflowClient(tracking_uri=uri)
    experiment = _suite_experiment(client, out)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    state = view_state(suite_axes(out, [r.data.params for r in runs]))
    client.set_experiment_tag(experiment.experiment_id, KIND_TAG, KIND)
    client.set_experiment_tag(experiment.experiment_id, SHARE_TAG, json.dumps(state))
    return experiment.experiment_id


def _suite_experiment(client: Any, out: Path) -> Any:
    """The experiment named by `out/suite.yaml`, else the one experiment with runs (the newest if several)."""
    if OutputFolder(out).suite.exists():
        import yaml

        name = (yaml.safe_load(OutputFolder(out).suite.read_text()) or {}).get("name")
        if name and (found := client.get_experiment_by_name(str(name))) is not None:
            return found
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    if not experiments:
        raise NormbenchError(f"{out}: its mlflow.db holds no suite yet; run one first "
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


def serve(uri: str, host: str, port: int, url: str, open_browser: bool) -> int:
    """Run `mlflow ui` until it exits or Ctrl-C; print `url` (and open it) once the server answers."""
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    server = subprocess.Popen(cmd)
    try:
        if _wait_until_up(f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/health", server):
            print(f"MLflow UI: {url}  (Ctrl-C stops it)", flush=True)
            if open_browser:
                import webbrowser

                webbrowser.open(url)
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        server.wait()
        raise


def _wait_until_up(health: str, server: subprocess.Popen, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(health, timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return server.poll() is None
