"""Faults, second round (a smaller point): a PostgreSQL worker printed Optuna's ExperimentalWarning for the features
normbench uses knowingly (the storage's heartbeat, failing stale trials). Those are silenced by their message; any
other experimental warning still shows."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

WORKER = """
import sys, warnings
import optuna
from normbench.store.attempts import reclaim
from normbench.store.ledger import Ledger

ledger = Ledger(sys.argv[1], sys.argv[2], heartbeat_interval=1, grace_period=6)
study = ledger.study("run:tiny")
reclaim(ledger, study)  # fail_stale_trials, as every turn of a worker
warnings.warn("another feature is experimental", optuna.exceptions.ExperimentalWarning)
"""


@pytest.mark.postgres
def test_a_postgres_ledger_prints_no_experimental_warning_of_its_own(fresh_postgres_url, tmp_path):
    done = subprocess.run([sys.executable, "-c", WORKER, fresh_postgres_url, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "heartbeat_interval" not in done.stderr and "fail_stale_trials" not in done.stderr, done.stderr
    assert done.stderr.count("ExperimentalWarning") == 1  # the filter is precise: others still show
    assert "another feature is experimental" in done.stderr
