"""An unreachable ledger database: exit 3, a message naming the URL. An unreachable MLflow server is no reason to stop:
the run trains every cell into the ledger, warns once naming the URL, and a later sync fills MLflow in."""

from __future__ import annotations

import socket

import pandas as pd

from normbench.cli import main


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_database_exits_3_naming_the_url(write_suite, tmp_path, capsys):
    path = write_suite(tune={"trials": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    url = f"postgresql://normbench:secret@127.0.0.1:{closed_port()}/normbench"
    for command in (["run", str(path)], ["tune", str(path)], ["worker", str(path)]):
        assert main([*command, "--out", str(tmp_path / "out"), "--storage", url, "--quiet"]) == 3
        err = capsys.readouterr().err
        assert url.replace("secret", "***") in err
        assert "secret" not in err and "Traceback" not in err


def test_an_unreachable_tracking_server_trains_every_cell_and_a_later_sync_logs_them(write_suite, tmp_path, capsys,
                                                                                    monkeypatch):
    path = write_suite(matrix={"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    uri = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert len(pd.read_csv(out / "results.csv")) == 2 and "Traceback" not in err
    warnings = [line for line in err.splitlines() if line.startswith("normbench: warning:")]
    assert len(warnings) == 2 and all(uri in w for w in warnings), err  # live logging's one, the end sync's one
    assert "normbench sync" in warnings[0]

    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert main(["sync", str(out)]) == 0
    assert "2 runs added" in capsys.readouterr().out
