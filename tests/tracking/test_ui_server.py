"""`normbench ui`'s server: one uvicorn process serving MLflow's app (its page given the groups' colours), no job
runner, MLflow's output in a log file in the output folder; a real start syncs the folder from its ledger and prints
the URL (and nothing else) once the server answers."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.environment_variables import (
    _MLFLOW_IN_JOB_EXECUTOR,
    _MLFLOW_SERVER_BOOT_ID,
    _MLFLOW_SGI_NAME,
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION,
)
from mlflow.server.constants import ARTIFACT_ROOT_ENV_VAR, BACKEND_STORE_URI_ENV_VAR

from normbench.errors import NormbenchError
from normbench.tracking import ui
from normbench.tracking.view_cache import PreparedView
from normbench.tracking.view_state import SHARE_TAG, VIEW_COLOURS
from tests.tracking.ledgers import write_ledger

STARTUP_BOUND_S = 180  # generous: a loaded CI machine; on 2 idle cores it is ~4 s (README, `normbench ui`)


def test_the_server_is_one_uvicorn_process_serving_mlflows_app_without_its_job_runner(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd, env = ui.server_command(uri, tmp_path, "127.0.0.1", 5123, {"param.layer.a": "#123456"})
    assert cmd[:4] == [sys.executable, "-m", "uvicorn", "normbench.tracking.ui_app:app"]  # MLflow's app, wrapped
    assert json.loads(env[ui.COLOURS_ENV]) == {"param.layer.a": "#123456"}
    assert cmd[cmd.index("--workers") + 1] == "1"  # uvicorn runs one worker in its own process: no supervisor
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5123"
    assert "--no-access-log" in cmd
    # the names `mlflow server` gives its workers, as the installed MLflow spells them
    assert env[BACKEND_STORE_URI_ENV_VAR] == uri
    assert env[ARTIFACT_ROOT_ENV_VAR] == (tmp_path / "mlartifacts").resolve().as_uri()
    assert env[MLFLOW_SERVER_ENABLE_JOB_EXECUTION.name] == "false"
    assert env[_MLFLOW_SGI_NAME.name] == "uvicorn" and env[_MLFLOW_IN_JOB_EXECUTOR.name] == "false"
    assert len(env[_MLFLOW_SERVER_BOOT_ID.name]) == 32


def test_a_server_that_dies_is_reported_with_its_log(tmp_path: Path, monkeypatch) -> None:
    dying = [sys.executable, "-c", "import sys; print('no such store: boom'); sys.exit(3)"]
    monkeypatch.setattr(ui, "server_command", lambda *a, **k: (dying, {}))
    monkeypatch.setattr(ui, "open_view", lambda *args: PreparedView("1", {}, []))
    with pytest.raises(NormbenchError) as error:
        ui.run_ui("sqlite:///x.db", tmp_path, "127.0.0.1", 1, open_browser=False)
    message = str(error.value)
    assert "exited with code 3" in message and "no such store: boom" in message
    assert str(tmp_path / ui.UI_LOG) in message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _read_until(proc: subprocess.Popen, end: bytes, timeout: float) -> str:
    """Its stdout up to the line holding `end` (or what came until it exited or `timeout`), read unbuffered."""
    deadline, got = time.monotonic() + timeout, b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not (end in got and got.endswith(b"\n")) and sel.select(max(0.0, deadline - time.monotonic())):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            got += chunk
    return got.decode()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts processes through /proc (Linux)")
def test_normbench_ui_answers_with_one_server_process_and_keeps_mlflow_out_of_stdout(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_ledger(out)  # a ledger and no MLflow store: `ui` syncs one
    port, server = _free_port(), 0
    started = time.monotonic()
    # Ctrl-C as a terminal delivers it: a test run started in the background (`cmd &`) hands its children SIGINT
    # ignored, and `normbench ui` would rightly go on serving
    proc = subprocess.Popen([sys.executable, "-m", "normbench", "ui", str(out), "--port", str(port), "--no-browser"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        printed = _read_until(proc, b"server log:", STARTUP_BOUND_S)
        seconds = time.monotonic() - started
        line = printed.split("\n", 1)[0]
        assert line.startswith(f"MLflow UI: http://127.0.0.1:{port}/#/experiments/"), (line, proc.poll())
        children = _children(proc.pid)
        assert len(children) == 1, f"{len(children)} server processes"
        server = children[0]
        assert "uvicorn" in Path(f"/proc/{server}/cmdline").read_text() and not _children(server)
        experiment_id = line.split("/experiments/")[1].split("/")[0]
        api = f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/get?experiment_id={experiment_id}"
        with urllib.request.urlopen(api, timeout=30) as answer:
            tags = {t["key"]: t["value"] for t in json.load(answer)["experiment"]["tags"]}
        assert json.loads(tags[SHARE_TAG])["groupBy"]["groupByKeys"] == [
            {"mode": "param", "groupByData": "depth"}, {"mode": "param", "groupByData": "layer"}]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as page:
            html = page.read()
        assert b"<html" in html.lower()  # the UI itself, not only the API
        colours = html.split(b"Object.assign(c,", 1)[1].split(b")", 1)[0]  # the groups' colours, ahead of MLflow's
        assert json.loads(colours) == {"param.depth.1,param.layer.layernorm": VIEW_COLOURS[0],  # the suite's order
                                       "param.depth.1,param.layer.layerscale": VIEW_COLOURS[1]}
        assert html.index(b"experimentRunColors") < html.index(b"static/js/main.")  # before MLflow's bundle runs
        # the table rounds where it prints, and a chart's legend lists every row (scripts/ui-screenshots.sh shows both)
        from normbench.tracking.ui_app import LEGEND_STYLE, ROUND_SCRIPT  # MLflow's server app: imported here only

        assert ROUND_SCRIPT.encode() in html and LEGEND_STYLE.encode() in html
        # a runs search gets every run at once, whatever page the UI asks for: the table averages a group over the
        # runs it has loaded (its page is 100), so a smaller page would average a row over some of its seeds
        search = urllib.request.Request(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/runs/search", method="POST",
                                        data=json.dumps({"experiment_ids": [experiment_id], "max_results": 1}).encode(),
                                        headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(search, timeout=30) as answer:
            found = json.load(answer)
        assert len(found["runs"]) > 1 and "next_page_token" not in found, (len(found["runs"]), found.keys())
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, err = proc.communicate(timeout=60)
            hung = ""
        except subprocess.TimeoutExpired:  # say where it hung (each thread's kernel wait), then kill it
            hung = f"`normbench ui` still ran 60 s after Ctrl-C; its threads: {_threads(proc.pid)}"
            proc.kill()
            rest, err = proc.communicate()
    gone_by = time.monotonic() + 15  # on a loaded machine an orphan is reaped by init a moment later
    while Path(f"/proc/{server}").exists() and time.monotonic() < gone_by:
        time.sleep(0.2)
    err = err.decode()
    assert not hung, f"{hung}\nstderr: {err[-2000:]}"
    assert not Path(f"/proc/{server}").exists()  # the server went with it (stopped and reaped)
    assert printed.splitlines()[1:] + rest.decode().splitlines() == [
        f"  charts: {ui.ui_url('127.0.0.1', port, experiment_id, charts=True)}", f"  server log: {out / ui.UI_LOG}"]
    assert "Warning" not in err and "INFO" not in err, err  # MLflow's noise is in the log file
    assert "Application startup complete" in (out / ui.UI_LOG).read_text()
    assert seconds < STARTUP_BOUND_S


def _threads(pid: int) -> str:
    """The kernel's view of a process's threads: each one's name and what it waits in (no debugger needed)."""
    rows = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            rows.append(f"{(task / 'comm').read_text().strip()}:{(task / 'wchan').read_text().strip()}")
        except OSError:
            continue
    return ", ".join(rows)
