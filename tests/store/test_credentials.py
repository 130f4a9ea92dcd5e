"""A storage URL with a password is never written out: not on stdout or stderr (also in a refusal that names the
ledger), not in the output folder (results, leaderboard, the MLflow store), not in MLflow's params or tags."""

from __future__ import annotations

import pytest
import yaml
from mlflow.tracking import MlflowClient
from sqlalchemy.engine import make_url

from normbench.cli import main

pytestmark = pytest.mark.postgres


def test_the_ledger_password_is_masked_everywhere(write_suite, tmp_path, fresh_postgres_url, capsys):
    password = make_url(fresh_postgres_url).password
    path, out = write_suite(), tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--storage", fresh_postgres_url]) == 0
    suite = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**suite, "train": {**suite["train"], "epochs": 2}}))  # another recipe: refused
    assert main(["run", str(path), "--out", str(out), "--storage", fresh_postgres_url]) == 2
    printed = capsys.readouterr()
    assert "mix recipes" in printed.err and ":***@" in printed.err  # the refusal names the ledger, masked
    assert password not in printed.out + printed.err
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "results.csv" for p in written)
    assert not [p for p in written if password.encode() in p.read_bytes()]
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert runs and not [r for r in runs if password in str(r.data.params) + str(r.data.tags)]
