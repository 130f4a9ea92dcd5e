"""normbench/settings.py: every NORMBENCH_* value checked before anything is created, one line, exit 2."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.settings import SPEC, Settings, SettingsError
from tests.conftest import REPO

BAD = [("NORMBENCH_HEARTBEAT_INTERVAL", "abc", "whole number"), ("NORMBENCH_HEARTBEAT_GRACE", "later", "whole number"),
       ("NORMBENCH_RETRY_SECONDS", "x", "seconds, 0 or more"), ("NORMBENCH_POLL_SECONDS", "-1", "more than 0"),
       ("NORMBENCH_MAX_ATTEMPTS", "0", "1 or more"), ("NORMBENCH_JOURNAL_LOCK_GRACE", "soon", "more than 0"),
       ("NORMBENCH_FASTPATH", "yes", "0 (off) or 1 (on)"),
       ("NORMBENCH_HOST", "node-a\nnode-b", "no control characters")]


def test_the_table_and_the_dataclass_name_the_same_settings():
    assert [f.name for f in dataclasses.fields(Settings)] == [spec[0] for spec in SPEC.values()]


def test_defaults_and_values():
    defaults = Settings.from_environ({})
    assert (defaults.heartbeat_interval, defaults.heartbeat_grace, defaults.poll_seconds, defaults.max_attempts,
            defaults.retry_seconds, defaults.fastpath) == (10, 60, 2.0, 3, 300.0, True)
    assert defaults.host and defaults.cache == Path.home() / ".cache" / "normbench"
    given = Settings.from_environ({"NORMBENCH_POLL_SECONDS": "0.5", "NORMBENCH_RETRY_SECONDS": "0",
                                   "NORMBENCH_HOST": "node-a", "NORMBENCH_LAYER_MODULES": "a, b,,",
                                   "NORMBENCH_FASTPATH": "0"})
    assert (given.poll_seconds, given.retry_seconds, given.host, given.layer_modules, given.fastpath) == (
        0.5, 0.0, "node-a", ("a", "b"), False)


@pytest.mark.parametrize(("name", "value", "accepted"), BAD)
def test_a_bad_value_names_the_variable_the_value_and_what_is_accepted(name, value, accepted):
    with pytest.raises(SettingsError) as caught:
        Settings.from_environ({name: value})
    message = str(caught.value)
    assert message.startswith(f"{name}={value!r}: ") and accepted in message and "unset it" in message


@pytest.mark.parametrize(("name", "value", "accepted"), BAD[:4])
def test_a_run_with_a_bad_value_exits_2_in_one_line_and_creates_nothing(tmp_path, name, value, accepted):
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MLFLOW_DISABLE_TELEMETRY": "true", name: value}
    proc = subprocess.run([sys.executable, "-m", "normbench", "run", "suites/smoke.yaml", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "Traceback" not in proc.stderr
    assert name in proc.stderr and accepted in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("below", [False, True])
def test_a_cache_folder_that_cannot_be_created_is_refused_up_front_in_one_line(tmp_path, below):
    out, blocker = tmp_path / "out", tmp_path / "blocker"
    blocker.write_text("a file where the cache folder, or its parent, should be")
    cache = blocker / "cache" if below else blocker
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MLFLOW_DISABLE_TELEMETRY": "true",
           "NORMBENCH_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "normbench", "run", "suites/smoke.yaml", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"normbench: error: NORMBENCH_CACHE={str(cache)!r}: {blocker} is a file, not a folder "
                           "(where computed data ceilings are cached); point it at a folder you can write, or unset "
                           "it for ~/.cache/normbench\n")
    assert not out.exists() and blocker.is_file()
