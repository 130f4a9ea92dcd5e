"""Shared fixtures: tiny suites, an isolated MLflow, and the PostgreSQL server fixtures."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.postgres_server import fresh_postgres_url, postgres_url  # noqa: F401  (fixtures)

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ.pop("MLFLOW_TRACKING_URI", None)  # every test logs into its own output folder
# one data-ceiling cache for the session (report/ceiling.py): the digits ceiling trains once, not per leaderboard,
# and nothing is written under the user's home
os.environ["NORMBENCH_CACHE"] = tempfile.mkdtemp(prefix="normbench-cache-")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `-n N`: N test processes share the cores; each (and every process it
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # starts) takes one thread, not a pool that thrashes the others

REPO = Path(__file__).resolve().parents[1]

TINY = {
    "name": "tiny",
    "dataset": {"name": "digits"},
    "model": {"embed_dim": 16, "num_heads": 2, "patch_size": 4},
    "train": {"epochs": 1, "batch_size": 256, "warmup_epochs": 0},
    "matrix": {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1.0e-3], "seed": [0]},
}


# Tests whose processes race each other or a clock with little to spare: heartbeats judged against a grace of a few
# seconds, a server stopped while a worker polls every 2 s, workers racing to claim cells, a bound of half a second.
# They get the `serial` mark, and `scripts/test.sh` runs them on their own after the rest has run on two xdist
# workers, so that no test next door slows one of their processes past its margin. The other fault tests wait for
# events (a trial RUNNING, a checkpoint, a process stopped where it was seen), which a busy machine only delays.
# Node id prefixes: a file, or one test.
SERIAL = (
    "tests/faults/test_postgres_faults.py",
    "tests/faults/test_second_round.py::test_a_postgres_blip_while_a_worker_idles_and_polls_is_ridden_out",
    "tests/faults/test_spool.py",
    "tests/faults/test_tracking_outage.py::test_a_tracking_server_restart_mid_cell_costs_one_warning_and_the_runs",
    "tests/train/test_distributed.py::test_three_workers_run_every_cell_exactly_once",
    "tests/train/test_distributed.py::test_worker_killed_mid_cell_has_its_cell_finished_by_another",
    "tests/store/test_ledger_heartbeat_outage.py",
    "tests/store/test_attempts.py::test_a_database_ledger_counts_heartbeat_verdicts",
    "tests/train/test_distributed.py::test_a_claimed_trial_goes_stale_even_if_its_worker_dies_before_training",
    "tests/sweep/test_runner.py::test_two_local_workers_run_every_cell_exactly_once",
    "tests/faults/test_clock_skew.py",  # heartbeats against a 6 s grace, on skewed clocks
    "tests/faults/test_repeated_kills.py",  # kills at random moments; a 3 s journal lock grace
    "tests/faults/test_two_journal_workers.py",  # two workers racing for cells, seen training side by side
    # Ctrl-C gives the workers 5 s to hand their cells back before they are terminated (a loaded CI run once left a
    # claim RUNNING unsigned: a Ctrl-C inside the claim's write, now held until it returns, store/ledger.py `_take`)
    "tests/faults/test_third_round.py::test_ctrl_c_to_a_run_with_two_workers_exits_143_like_sigterm",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


@pytest.fixture
def write_suite(tmp_path: Path):
    """Write a suite YAML from TINY plus overrides (`None` deletes a key); returns its path."""

    def write(name: str = "tiny", **overrides) -> Path:
        suite = {**TINY, "name": name}
        for key, value in overrides.items():
            if value is None:
                suite.pop(key, None)
            else:
                suite[key] = value
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(suite, sort_keys=False))
        return path

    return write


@pytest.fixture
def one_torch_thread():
    """For tiny models: one thread is faster than a pool, and does not thrash on a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT as Python's KeyboardInterrupt for the test, whatever the runner started with (a shell's background
    job, as some CI runners start pytest, has it ignored)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
